"""Sans-I/O RoCEv2 transport core: wire codec, queue pairs, DCQCN, ECN marking decision.

Nothing here touches sockets, clocks or global randomness: callers pass `now` (seconds) and get
back packets to send, deadlines and events (emulator.transport.events).
"""
