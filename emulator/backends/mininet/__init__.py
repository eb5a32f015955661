"""On a Mininet network a user built and started (backend `mininet`): backend.py; the entry
point for a user's Mininet script is emulator.mininet.run_on_mininet."""
