"""The flow-level model (backend `flow`): queue pairs as DCQCN fluid rates over fluid queues
(model.py), the trace's flows over it (replay.py)."""
