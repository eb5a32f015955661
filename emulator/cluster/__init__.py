"""One run over several servers: Ray as the control plane, the data path as on one machine.

spec.py (`run.cluster:`), placement.py (which server hosts what), connect.py (joining the
cluster safely, one actor per server in one placement group, clock offsets), server.py (the
actor: a server's fabric part, workers and counters), bridge.py (the driver's side: remote
workers that look local to the coordinator). The backend is emulator/backends/cluster.py.
Nothing here imports Ray at module level: a run without a cluster never loads it.
"""
