"""What the engine-backed backends share (backends/netns, dut, mininet, cluster).

session.py        EngineSession: a planned workload replayed by the engine on a live fabric
sampling.py       the sampler thread: NIC, switch port and CPU counters in target time
pfc_generator.py  PFC frames a scenario asks a rank's NIC to send
pfc_readings.py   the PFC frames each rank's NIC received
load_curve.py     this machine's load curve, measured with the engine (time_dilation auto)
backend.py        EngineBackend: the failure and the caveats every engine backend shares
caveats.py        what a run on real packets reads otherwise than the simulator (transmit turns)
"""
