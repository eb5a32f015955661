"""The emulated Clos on this machine (backend `netns`): backend.py."""
