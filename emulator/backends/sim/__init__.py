"""The packet-level simulation of the Clos (backend `sim`): backend.py."""
