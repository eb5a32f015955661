"""The BMWG procedures by name (`emulate bmwg PROCEDURE SCENARIO`)."""

from __future__ import annotations

from emulator.errors import InputError
from emulator.studies.bmwg.balancing import EcmpEntropy, Flowlet, PacketSpray
from emulator.studies.bmwg.congestion import DcqcnConvergence, PfcIncast
from emulator.studies.bmwg.failure import LinkFailure
from emulator.studies.bmwg.procedure import Procedure
from emulator.studies.bmwg.tenants import MultiTenant
from emulator.studies.bmwg.thresholds import BurstAbsorption, EcnMarking

PROCEDURES: dict[str, Procedure] = {
    p.name: p
    for p in (
        BurstAbsorption(),
        EcnMarking(),
        PfcIncast(),
        DcqcnConvergence(),
        EcmpEntropy(),
        Flowlet(),
        PacketSpray(),
        MultiTenant(),
        LinkFailure(),
    )
}

# What the draft defines that this tool does not run, and why (the report and docs say so).
NOT_IMPLEMENTED = {
    "5.1 baseline throughput": "an RFC 2544 binary search over 60 s trials per message size; "
    "the engine's queue pairs saturate their links by design (pfc-incast and ecmp-entropy "
    "report goodput)",
    "5.2 latency characterization": "one-way latency per packet is in the runs "
    "(metrics.one_way_latency), not yet summarized as a procedure",
    "6 UET": "the transport is RoCEv2 (go-back-N or selective repeat), not UET",
    "7.4 PFC storm and deadlock": "the emulated Linux fabric does not pause; the simulator's "
    "cyclic-dependency behaviour is not modelled",
    "9 collectives at scale, 10.1 synthetic JCT, 10.2 MLPerf": "`emulate run` of a generated "
    "collective gives BusBW with the draft's factors and the JCT ratio (summary.json)",
    "11.1 scale, 12 soak": "thousands of ranks and 24-hour runs are beyond this tester",
}


def procedure(name: str) -> Procedure:
    found = PROCEDURES.get(name)
    if found is None:
        raise InputError(f"bmwg {name}: not a procedure; one of {', '.join(PROCEDURES)}")
    return found
