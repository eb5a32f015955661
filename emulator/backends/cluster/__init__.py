"""One run over several servers (backend `cluster`): Ray as the control plane, the data path as on
one machine.

backend.py (the backend and its session at the driver), placement.py (which server hosts what),
connect.py (joining the cluster safely, one actor per server in one placement group, clock
offsets), server.py (the actor: a server's fabric part, workers and counters), bridge.py (the
driver's side: remote workers that look local to the coordinator), local.py (several "servers" on
this machine, for the tests and the bench). `run.cluster:` itself is emulator/scenario/cluster.py.
Nothing here imports Ray at module level: a run without a cluster never loads it.
"""
