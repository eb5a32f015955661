"""Toward a switch under test (backend `dut`): backend.py."""
