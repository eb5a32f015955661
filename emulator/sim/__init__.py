"""In-memory discrete-event packet fabric that runs the transport core (tests and studies).

Hosts run emulator.transport endpoints; links have a rate and a propagation delay; switch output
ports have a byte buffer with tail drop and the transport's ECN marking decision; ECMP hashes the
UDP source port. Everything random comes from one seeded random.Random, so a run is reproducible.
"""
