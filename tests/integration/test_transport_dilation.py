"""Time dilation on the in-memory fabric: a 100 Gb/s fabric and the same fabric slowed ten times
(link rates / 10, link delays and transport timers x 10, sizes unchanged) give the same run in
units of the target fabric."""

from __future__ import annotations

import pytest

from emulator.transport.params import EcnMarkingParams, TransportParams
from tests.integration.dilation import dilate
from tests.integration.in_memory import LinkSpec, Network, star

# A step marker (Kmin = Kmax) is deterministic: the random draws of a RED-like marker would land
# on different packets once float rounding reorders two events, and the runs would drift apart.
STEP_MARKING = EcnMarkingParams(kmin_bytes=200_000, kmax_bytes=200_000, pmax=1.0)


def incast(tdf: float) -> Network:
    net = star(
        4,
        params=dilate(TransportParams(), tdf),
        link=LinkSpec(rate_bps=100e9 / tdf, delay_s=1e-6 * tdf),
        marking=STEP_MARKING,
        seed=3,
    )
    for i in range(3):
        net.add_flow(f"h{i}", "h3", 4_000_000, start_s=i * 50e-6 * tdf)
    net.run(until_s=0.1 * tdf)
    return net


def test_dilated_fabric_reproduces_the_target_fabric() -> None:
    target, slowed = incast(1.0), incast(10.0)
    fct_target = [f.completed.fct_s for f in target.flows if f.completed]
    fct_slowed = [f.completed.fct_s / 10 for f in slowed.flows if f.completed]
    assert len(fct_target) == len(fct_slowed) == 3
    assert fct_slowed == pytest.approx(fct_target, rel=1e-6)
    assert slowed.cnps_sent() == target.cnps_sent() > 0
    marks = [sum(p.marks for p in net.ports.values()) for net in (target, slowed)]
    assert marks[0] == marks[1] > 0
