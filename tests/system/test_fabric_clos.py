"""A 16-host leaf/spine Clos of namespace routers: reachability, ECMP spreading, ECN marking."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest

from emulator.errors import ScenarioError
from fabrics.counters import read_port_counters
from fabrics.netns import bring_up
from fabrics.qdisc_stats import QdiscStats
from fabrics.spec import ClosSpec, EcnSpec, TierSpec
from fabrics.topology import Topology, build_clos
from tests.system.conftest import Receiver, paced_send, ping_all_pairs, udp_socket
from tests.system.noise import Try, on_a_noisy_machine

pytestmark = pytest.mark.system
PER_FLOW = 3  # datagrams per source port


def _links_taken(
    live: Any, topo: Topology, src: str, dst: str, sports: Iterable[int], routers: list[str]
) -> dict[int, tuple[list[str], list[str]]]:
    """sport -> (egress interfaces of `routers` the kernel sent its datagrams through, those
    Topology.path predicts), one flow at a time from unconnected sockets (no per-socket hash)."""
    address = {h: str(topo.host_address(h)) for h in (src, dst)}
    out: dict[int, tuple[list[str], list[str]]] = {}
    for sport in sports:
        before = read_port_counters(live, routers)
        s = udp_socket(live.netns_of(src))
        s.bind((address[src], sport))
        for _ in range(PER_FLOW):
            s.sendto(b"x" * 200, (address[dst], 4791))
        s.close()
        deadline = time.monotonic() + 2
        while True:
            after = read_port_counters(live, routers)
            delta = {p: after[p].tx_packets - before[p].tx_packets for p in after if p in before}
            seen = sorted(p[1] for p, n in delta.items() if n >= PER_FLOW and "-h" not in p[1])
            if len(seen) >= len(routers) or time.monotonic() > deadline:
                break
        path = topo.path(src, dst, sport)
        predicted = sorted(link.src_ifname for link in path if link.src in routers)
        out[sport] = (seen, predicted)
    return out


def test_each_router_hashes_with_its_own_seed_so_the_spine_does_not_repeat_the_leaf(
    fabric_env: str,
) -> None:
    """Two parallel links leaf -> spine and spine -> leaf: with one seed everywhere the spine's
    hash-threshold choice would repeat the leaf's (uplink k -> downlink k, polarization); with a
    seed per router (Cisco's universal ID) all four combinations are used, each as predicted."""
    spec = ClosSpec(
        hosts_per_leaf=1,
        leaves=2,
        spines=1,
        parallel_links=2,
        host_link_gbps=10,
        fabric_link_gbps=10,
    )
    topo = build_clos(spec)
    assert topo.router_seed("l0") != topo.router_seed("s0")
    with (
        bring_up(topo, rate_scale=0.1, prefix=fabric_env) as live,
        Receiver(live.netns_of("h1"), port=4791) as rx,
    ):
        taken = _links_taken(live, topo, "h0", "h1", range(49152, 49152 + 48), ["l0", "s0"])
        rx.wait_for(48 * PER_FLOW, timeout_s=5)
        # a run's sampler reads the same port counters over rtnetlink as through tc (the fabric
        # is quiet now: IPv6 off, nothing else sends)
        qdiscs = QdiscStats()
        try:
            tc_before = read_port_counters(live)
            netlink = read_port_counters(live, qdiscs=qdiscs)
            tc_after = read_port_counters(live)
        finally:
            qdiscs.close()
    assert tc_before == tc_after, "something crossed the fabric between the readings"
    assert netlink == tc_before
    assert sum(c.tx_packets for c in netlink.values()) >= 2 * 48 * PER_FLOW
    mismatched = {sport: pair for sport, pair in taken.items() if pair[0] != pair[1]}
    assert not mismatched, f"kernel ECMP differed from Topology.path: {mismatched}"
    combinations = {tuple(seen) for seen, _ in taken.values()}
    assert len(combinations) == 4, combinations  # polarized, there would be 2


def test_16_hosts_all_pairs_ping_and_udp_sports_spread_over_both_spines(fabric_env: str) -> None:
    spec = ClosSpec(hosts_per_leaf=4, leaves=4, spines=2, host_link_gbps=10, fabric_link_gbps=10)
    topo = build_clos(spec)
    with bring_up(topo, rate_scale=0.1, prefix=fabric_env) as live:
        assert live.marker_name == "ebpf"  # auto: the eBPF marker, whatever the kernel has
        assert live.ranks == 16 and live.rank_netns(5) == live.netns_of("h5")
        assert live.rank_rate_bps(0) == pytest.approx(1e9)  # 10 Gb/s target at rate_scale 0.1
        live.check_destination(0, live.rank_address(15))
        with pytest.raises(ScenarioError, match="not a host of this fabric"):
            live.check_destination(0, "8.8.8.8")
        hosts = {h: live.netns_of(h) for h in topo.hosts}
        addresses = {h: str(topo.host_address(h)) for h in topo.hosts}
        answered = ping_all_pairs(hosts, addresses)
        missing = {(a, b) for a in hosts for b in hosts if a != b} - answered
        assert not missing, f"{len(missing)} pairs unanswered, e.g. {sorted(missing)[:5]}"

        # h0 (leaf l0) -> h4 (leaf l1): 64 source ports, 3 datagrams each, one flow at a time,
        # so each flow's uplink is seen in l0's counters and compared with Topology.path.
        src, dst = "h0", "h4"
        before_spines = read_port_counters(live, ["s0", "s1"])
        with Receiver(live.netns_of(dst), port=4791) as rx:
            taken = _links_taken(live, topo, src, dst, range(49152, 49152 + 64), ["l0"])
            rx.wait_for(64 * PER_FLOW, timeout_s=5)
        assert rx.packets == 64 * PER_FLOW
        mismatched = [sport for sport, (seen, predicted) in taken.items() if seen != predicted]
        assert not mismatched, f"kernel ECMP differed from Topology.path for sports {mismatched}"
        after_spines = read_port_counters(live, ["s0", "s1"])
        spine_ports = [("s0", "s0-l1"), ("s1", "s1-l1")]
        carried = {p: after_spines[p].tx_packets - before_spines[p].tx_packets for p in spine_ports}
        total = sum(carried.values())
        assert total >= 64 * PER_FLOW  # every datagram crossed one of the two spines
        for port, n in carried.items():
            assert n >= 0.25 * total, f"spine port {port} carried {n} of {total} packets"


def test_ecn_marks_only_above_link_rate_and_port_counters_match_receiver(fabric_env: str) -> None:
    # The phantom-vs-real queue comparison is a timing claim: a fresh fabric per try.
    on_a_noisy_machine(lambda tr: _marks_only_above_link_rate(tr, fabric_env), what="ecn marks")


def _marks_only_above_link_rate(tr: Try, fabric_env: str) -> None:
    ecn = EcnSpec(kmin_bytes=20_000, kmax_bytes=80_000, pmax=0.2)
    tier = TierSpec(buffer_bytes=8_000_000, ecn=ecn)
    spec = ClosSpec(
        hosts_per_leaf=2,
        leaves=2,
        spines=1,
        host_link_gbps=1,
        fabric_link_gbps=1,
        leaf=tier,
        spine=tier,
        mtu_bytes=1500,
    )
    topo = build_clos(spec)
    link_bps = 1e9 * 0.05
    payload = 1000
    with bring_up(topo, rate_scale=0.05, marker="ebpf", prefix=fabric_env) as live:
        addr = {h: str(topo.host_address(h)) for h in topo.hosts}
        # Below the link rate: one sender at half the bottleneck's rate.
        with Receiver(live.netns_of("h3"), port=5000) as rx:
            s = udp_socket(live.netns_of("h0"))
            sent = paced_send([(s, (addr["h3"], 5000))], link_bps / 2, payload, 1.0)
            rx.wait_for(sent, timeout_s=5)
            s.close()
        assert rx.packets == sent
        assert rx.ce <= 0.01 * sent, f"{rx.ce} CE marks of {sent} packets below the link rate"
        marks_below = sum(c.ecn_marks for c in read_port_counters(live).values())
        assert marks_below == rx.ce

        # Above: h0 (via the spine) and h2 (same leaf) both send to h3 at 0.8 x its link rate.
        with Receiver(live.netns_of("h3"), port=5001) as rx:
            a, b = udp_socket(live.netns_of("h0")), udp_socket(live.netns_of("h2"))
            dst = (addr["h3"], 5001)
            sent = paced_send([(a, dst), (b, dst)], 0.8 * link_bps, payload, 1.0)
            mid = read_port_counters(live, ["l1"])[("l1", "l1-h3")]
            rx.wait_for(2 * sent, timeout_s=10)
            a.close()
            b.close()
        counters = read_port_counters(live)
        tr.note(
            sent=2 * sent,
            received=rx.packets,
            ce=rx.ce,
            backlog=mid.backlog_bytes,
            phantom=mid.phantom_queue_bytes,
        )
        assert rx.packets == 2 * sent, "no drops expected: the buffer holds the whole excess"
        assert sum(c.drops for c in counters.values()) == 0
        assert rx.ce >= 0.1 * rx.packets, f"only {rx.ce} CE marks of {rx.packets} above the rate"
        marks = sum(c.ecn_marks for c in counters.values())
        assert marks - marks_below == rx.ce  # every mark a port counted reached the receiver
        bottleneck = counters[("l1", "l1-h3")]
        assert bottleneck.ecn_marks - marks_below == rx.ce
        assert bottleneck.peak_phantom_queue_bytes is not None
        # The phantom queue drains at the HTB rate, so it tracks the real queue behind the port.
        # Not exactly: the port's HTB waits whenever the host's veth ring (NAPI, 256 packets)
        # is full, so on this 2-core machine the real queue drains a few percent slower (about
        # 9% more backlog after 1 s of overload measured here) than the configured rate.
        assert mid.backlog_bytes > (ecn.kmax_bytes or 0) and mid.phantom_queue_bytes is not None
        assert abs(mid.phantom_queue_bytes - mid.backlog_bytes) <= 0.15 * mid.backlog_bytes
        assert bottleneck.peak_phantom_queue_bytes > (ecn.kmax_bytes or 0)
