"""The in-memory fabric itself: reproducible with a seed, ECMP by UDP source port, tail drop."""

from __future__ import annotations

from emulator.transport.params import TransportParams
from tests.integration.in_memory import LinkSpec, clos, star


def run_incast(seed: int) -> list[str]:
    net = star(4, seed=seed)
    for i in range(3):
        net.add_flow(f"h{i}", "h3", 1_000_000)
    net.run(until_s=0.05)
    return [repr(e) for e in net.events]


def test_same_seed_same_run() -> None:
    first, again = run_incast(7), run_incast(7)
    assert first == again
    assert any("CnpSent" in e for e in first)  # the run exercised the random marker
    assert run_incast(8) != first


def test_ecmp_keeps_a_flow_on_one_spine_and_spreads_source_ports() -> None:
    net = clos(leaves=2, spines=2, hosts_per_leaf=1, seed=3)
    net.add_flow("h0_0", "h1_0", 200_000, sport=50_000)
    net.run(until_s=0.01)
    per_spine = [net.ports[f"leaf0->spine{j}"].tx_frames for j in range(2)]
    assert sorted(per_spine)[0] == 0 and sorted(per_spine)[1] > 0

    net = clos(leaves=2, spines=2, hosts_per_leaf=1, seed=3)
    for k in range(32):
        net.add_flow("h0_0", "h1_0", 8_192, sport=49_152 + k)
    net.run(until_s=0.01)
    per_spine = [net.ports[f"leaf0->spine{j}"].tx_frames for j in range(2)]
    assert min(per_spine) >= 0.25 * sum(per_spine)
    assert all(f.completed is not None for f in net.flows)


def test_tail_drop_with_a_small_buffer_and_recovery() -> None:
    buffer_bytes = 60_000
    net = star(
        5,
        params=TransportParams(congestion_control="none"),
        link=LinkSpec(buffer_bytes=buffer_bytes),
        seed=2,
    )
    flows = [net.add_flow(f"h{i}", "h4", 500_000) for i in range(4)]
    net.run(until_s=0.2)
    port = net.ports["sw->h4"]
    assert port.drops > 0 and port.max_queued_bytes <= buffer_bytes
    assert all(f.completed is not None for f in flows)
    assert all(f.receiver.delivered_bytes == f.size_bytes for f in flows)
    assert net.retransmissions()
