"""The flow-level backend (`flow`): backend.py; the model is emulator/flow."""
