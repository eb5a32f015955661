"""The transport core on the in-memory fabric: issue 4, "what must be shown" 1-4, and real
encoded bytes end to end."""

from __future__ import annotations

import random

import pytest

from emulator.transport.events import MessageReceived
from emulator.transport.params import DcqcnParams, EcnMarkingParams, TransportParams
from tests.integration.in_memory import Flow, LinkSpec, Network, star

LINE_BPS = 100e9


def assert_delivered_exactly_once_in_order(net: Network, flows: list[Flow]) -> None:
    for flow in flows:
        assert flow.completed is not None, f"flow {flow.flow_id} did not complete"
        rx = flow.receiver
        assert rx.delivered_bytes == flow.size_bytes
        deliveries = rx.deliveries or []
        # every packet delivered carries the offset the sender cut it at: in order, no gap, no
        # repeat, all in message 0
        assert [off for _, off, _ in deliveries] == [p.offset_bytes for _, _, p in deliveries]
        assert {m for m, _, _ in deliveries} == {0}
        expected = 0
        for _, off, packet in deliveries:
            assert off == expected
            expected += packet.payload_bytes
        assert expected == flow.size_bytes
    received = [e for e in net.events if isinstance(e, MessageReceived)]
    assert len(received) == len(flows)


def test_one_flow_on_idle_100g_link_reaches_line_rate() -> None:
    net = star(2, link=LinkSpec(rate_bps=LINE_BPS))
    flow = net.add_flow("h0", "h1", 20_000_000)
    net.run(until_s=0.01)
    assert flow.completed is not None
    goodput_bps = flow.size_bytes * 8 / flow.completed.fct_s
    assert goodput_bps >= 0.95 * LINE_BPS  # payload bytes only: headers make it ~0.978
    assert sum(p.marks for p in net.ports.values()) == 0
    assert net.retransmissions() == [] and flow.sender.packets_retransmitted == 0
    assert net.cnps_sent() == 0 and flow.sender.rate_bps == LINE_BPS


# Flows join one every 0.5 ms (the DCQCN paper's fairness experiment). With NVIDIA's increase
# defaults (rpg_time_reset 300 us, rpg_ai_rate 5 Mb/s) late joiners at 100 Gb/s need far longer
# than a test can simulate to catch up (Jain 0.83 for 8 flows after 30 ms, measured); the DCQCN
# paper's increase timer (55 us) and additive step (40 Mb/s) converge within 20 ms. Everything
# else is the NVIDIA default.
PAPER_INCREASE = DcqcnParams(rpg_time_reset_us=55.0, rpg_ai_rate_mbps=40.0)
JOIN_INTERVAL_S = 0.0005


@pytest.mark.parametrize("n_flows", [2, 4, 8])
def test_flows_into_one_bottleneck_share_fairly_with_bounded_queue(n_flows: int) -> None:
    marking = EcnMarkingParams()  # HPCC 100G: Kmin 400 KB, Kmax 1600 KB, Pmax 0.2
    link = LinkSpec(rate_bps=LINE_BPS, buffer_bytes=8_000_000)
    assert link.buffer_bytes > marking.kmax_bytes
    net = star(
        n_flows + 1,
        params=TransportParams(dcqcn=PAPER_INCREASE),
        link=link,
        marking=marking,
        seed=n_flows,
    )
    receiver = f"h{n_flows}"
    flows = [
        net.add_flow(f"h{i}", receiver, 10**11, start_s=i * JOIN_INTERVAL_S) for i in range(n_flows)
    ]
    bottleneck = net.ports[f"sw->{receiver}"]
    net.run(until_s=0.020)  # convergence
    before = [f.sender.bytes_acked for f in flows]
    bottleneck.queue_samples = []
    bottleneck.max_queued_bytes = 0
    window_s = 0.010
    net.run(until_s=0.020 + window_s)
    rates = [(f.sender.bytes_acked - b) * 8 / window_s for f, b in zip(flows, before, strict=True)]
    jain = sum(rates) ** 2 / (n_flows * sum(r * r for r in rates))
    assert jain >= 0.95, rates
    assert sum(rates) >= 0.95 * LINE_BPS
    assert sum(p.drops for p in net.ports.values()) == 0
    queue = [q for _, q in bottleneck.queue_samples or []]
    mean_queue = sum(queue) / len(queue)
    assert bottleneck.max_queued_bytes <= marking.kmax_bytes
    assert 0.5 * marking.kmin_bytes <= mean_queue <= marking.kmax_bytes
    assert net.cnps_sent() > 0


def test_one_percent_loss_every_flow_completes_exactly_once_in_order() -> None:
    net = star(5, link=LinkSpec(rate_bps=LINE_BPS, loss_probability=0.01), seed=11)
    # PSNs start 100 before the 24-bit wrap: every flow (about 490 packets) wraps mid-flow
    flows = [
        net.add_flow(f"h{i}", "h4", 2_000_000, record_deliveries=True, initial_psn=0xFFFF9B)
        for i in range(4)
    ]
    net.run(until_s=0.2)
    assert sum(p.losses for p in net.ports.values()) > 0
    assert net.retransmissions()
    assert_delivered_exactly_once_in_order(net, flows)
    rx_drops = net.hosts["h4"].drop_counts()
    assert rx_drops["out_of_sequence"] > 0  # losses were seen and recovered by go-back-N


def test_15_to_1_incast_completes_exactly_once_in_order() -> None:
    net = star(16, link=LinkSpec(rate_bps=LINE_BPS), seed=3)
    flows = [net.add_flow(f"h{i}", "h15", 1_000_000, record_deliveries=True) for i in range(15)]
    net.run(until_s=0.2)
    assert_delivered_exactly_once_in_order(net, flows)
    assert net.cnps_sent() > 0
    assert net.ports["sw->h15"].marks > 0


def test_real_encoded_bytes_end_to_end_with_marks_and_loss() -> None:
    """Every packet is a real IPv4/UDP/RoCEv2 packet with the ICRC for its IP id; switches set CE in
    the IP header; receivers parse, check the ICRC and reassemble the payload."""
    marking = EcnMarkingParams(kmin_bytes=5_000, kmax_bytes=50_000, pmax=0.5)
    net = star(
        3,
        params=TransportParams(path_mtu_bytes=1024),
        link=LinkSpec(rate_bps=10e9, loss_probability=0.005),
        marking=marking,
        seed=5,
        wire_bytes=True,
    )
    rng = random.Random(9)
    payloads = [rng.randbytes(300_000), rng.randbytes(123_457)]
    flows = [
        net.add_flow("h0", "h2", len(payloads[0]), payload=payloads[0], record_deliveries=True),
        net.add_flow("h1", "h2", len(payloads[1]), payload=payloads[1], record_deliveries=True),
    ]
    net.run(until_s=0.5)
    for flow, payload in zip(flows, payloads, strict=True):
        assert flow.completed is not None
        got = b"".join(p.payload or b"" for _, _, p in flow.receiver.deliveries or [])
        assert got == payload
    assert all(h.bad_icrc == 0 for h in net.hosts.values())
    assert sum(p.marks for p in net.ports.values()) > 0 and net.cnps_received() > 0
    assert sum(p.losses for p in net.ports.values()) > 0
