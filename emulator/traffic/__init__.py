"""Synthetic traffic patterns (rank pairs, N:1 incast, all-to-all) for switch tests: no trace
needed. `spec` is the scenario section, `schedule` the sans-I/O driver that posts the messages."""
