"""Chakra-driven RoCEv2 traffic emulator: trace -> schedule -> transport -> engine -> results."""

__version__ = "0.1.0"
