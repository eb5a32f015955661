"""Load balancing on real packets (fabrics/balance/): one UDP flow through a leaf of a 2-leaf,
2-spine Clos with 2 parallel links (4 uplinks), spraying, following flowlets or adapting to
queues instead of ECMP; link events; teardown leaves nothing behind."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from emulator.errors import EnvironmentProblem
from fabrics.balance import program
from fabrics.counters import read_port_counters
from fabrics.ecn import ebpf
from fabrics.ecn.bpf_syscall import BpfMap
from fabrics.ecn.markers import EbpfMarker
from fabrics.iproute import existing_netns, in_netns
from fabrics.netns import LiveFabric, bring_up
from fabrics.ownership import state_path
from fabrics.spec import ClosSpec, LoadBalancingSpec, TierSpec
from fabrics.topology import Topology, build_clos, cable_named
from tests.system.noise import Try, on_a_noisy_machine

pytestmark = pytest.mark.system

UPLINKS = ("l0-s0-0", "l0-s0-1", "l0-s1-0", "l0-s1-1")
SPORT, DPORT = 49152, 4791  # one RoCEv2 flow: a fixed 5-tuple
HOST_TTL = 64
HOPS = 3  # l0, a spine, l1
RATE_SCALE, TDF = 0.1, 10.0  # a 10 Gb/s target at 1 Gb/s, so target microseconds x 10
IP_RECVTTL = 12  # include/uapi/linux/in.h (the socket module lacks it)
SO_RCVBUFFORCE = 33


def _topology(**load_balancing: Any) -> Topology:
    lb = LoadBalancingSpec(**load_balancing)
    return build_clos(
        ClosSpec(
            hosts_per_leaf=1,
            leaves=2,
            spines=2,
            parallel_links=2,
            host_link_gbps=10,
            fabric_link_gbps=10,
            leaf=TierSpec(load_balancing=lb),
        )
    )


@contextmanager
def _fabric(prefix: str, **load_balancing: Any) -> Iterator[tuple[LiveFabric, Topology]]:
    topo = _topology(**load_balancing)
    with bring_up(topo, rate_scale=RATE_SCALE, delay_scale=TDF, prefix=prefix) as live:
        yield live, topo


class TtlReceiver:
    """The flow's receiver in h1: counts datagrams and the TTL each arrived with."""

    def __init__(self, live: LiveFabric) -> None:
        with in_netns(live.netns_of("h1")):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVTTL, 1)
        self.sock.bind(("0.0.0.0", DPORT))
        self.sock.settimeout(0.05)
        self.ttls: list[int] = []

    def collect(self, packets: int, timeout_s: float = 5.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while len(self.ttls) < packets and time.monotonic() < deadline:
            try:
                _, anc, _, _ = self.sock.recvmsg(2048, socket.CMSG_SPACE(4))
            except TimeoutError:
                continue
            for level, kind, data in anc:
                if level == socket.IPPROTO_IP and kind == socket.IP_TTL:
                    self.ttls.append(struct.unpack("=i", data[:4])[0])
        return self.ttls

    def close(self) -> None:
        self.sock.close()


def _sender(live: LiveFabric, topo: Topology) -> tuple[socket.socket, tuple[str, int]]:
    """An unconnected socket bound to the flow's source port (the kernel's ECMP then hashes
    the 5-tuple: no per-socket hash, fabrics/ecmp.py)."""
    with in_netns(live.netns_of("h0")):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, HOST_TTL)
    s.bind((str(topo.host_address("h0")), SPORT))
    return s, (str(topo.host_address("h1")), DPORT)


def _send(live: LiveFabric, topo: Topology, packets: int, gap_s: float = 0.0) -> None:
    s, dst = _sender(live, topo)
    try:
        for _ in range(packets):
            s.sendto(bytes(200), dst)
            if gap_s:
                time.sleep(gap_s)
    finally:
        s.close()


def _marker_packets(live: LiveFabric) -> dict[str, int]:
    assert isinstance(live.marker, EbpfMarker)
    ns = live.netns_of("l0")
    return {dev: ebpf.read_state(live.marker.maps[(ns, dev)]).packets for dev in UPLINKS}


def _carried(live: LiveFabric, action: Callable[[], None], packets: int) -> dict[str, int]:
    """Packets each uplink of l0 sent during `action` by its root HTB's counter, once they all
    have; the marker at each uplink's egress must have counted the same."""
    before = read_port_counters(live, ["l0"])
    marked_before = _marker_packets(live)
    action()
    deadline = time.monotonic() + 5
    while True:
        after = read_port_counters(live, ["l0"])
        out = {
            dev: after[("l0", dev)].tx_packets - before[("l0", dev)].tx_packets for dev in UPLINKS
        }
        if sum(out.values()) >= packets or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    marked = _marker_packets(live)
    assert {dev: marked[dev] - marked_before[dev] for dev in UPLINKS} == out
    return out


def test_spray_sends_one_flow_over_every_uplink_where_ecmp_keeps_one(fabric_env: str) -> None:
    packets = 400
    for mode in ("ecmp", "spray"):
        with _fabric(fabric_env, mode=mode) as (live, topo):
            rx = TtlReceiver(live)
            try:
                carried = _carried(live, lambda: _send(live, topo, packets), packets)
                ttls = rx.collect(packets)
            finally:
                rx.close()
            counts = live.balancer.counters() if live.balancer else None
        assert sum(carried.values()) == packets, (mode, carried)
        assert len(ttls) == packets, f"{mode}: {len(ttls)} of {packets} arrived"
        assert set(ttls) == {HOST_TTL - HOPS}, (mode, set(ttls))
        used = sorted(dev for dev, n in carried.items() if n)
        if mode == "ecmp":
            assert counts is None
            [ecmp_link] = [h.src_ifname for h in topo.path("h0", "h1", SPORT) if h.src == "l0"]
            assert used == [ecmp_link]
        else:
            assert counts is not None
            assert used == list(UPLINKS), carried
            assert counts["l0"].forwarded == packets
            # l1 delivers to its own host: nothing there has two next hops
            assert counts["l1"].forwarded == 0 and counts["l1"].passed >= packets


def test_round_robin_spreads_exactly_evenly(fabric_env: str) -> None:
    packets = 202
    with _fabric(fabric_env, mode="spray", spray_order="round_robin") as (live, topo):
        rx = TtlReceiver(live)
        try:
            carried = _carried(live, lambda: _send(live, topo, packets), packets)
            assert len(rx.collect(packets)) == packets
        finally:
            rx.close()
    assert sum(carried.values()) == packets
    assert max(carried.values()) - min(carried.values()) <= 1, carried


def test_flowlets_stay_on_one_uplink_and_move_after_a_gap(fabric_env: str) -> None:
    # The burst must not pause longer than the gap: a timing claim on a shared machine.
    on_a_noisy_machine(lambda tr: _flowlets(tr, fabric_env), what="flowlets")


def _flowlets(tr: Try, prefix: str) -> None:
    gap_us = 2000.0  # target time: 20 ms of wall time at TDF 10
    burst, spaced = 300, 24
    with _fabric(prefix, mode="flowlet", flowlet_gap_us=gap_us) as (live, topo):
        assert live.balancer is not None
        wall_gap_s = gap_us * 1e-6 * TDF
        burst_links = _carried(live, lambda: _send(live, topo, burst), burst)
        time.sleep(3 * wall_gap_s)
        spaced_links = _carried(live, lambda: _send(live, topo, spaced, 3 * wall_gap_s), spaced)
        counts = live.balancer.counters()["l0"]
    used = [dev for dev, n in burst_links.items() if n]
    tr.note(burst=burst_links, spaced=spaced_links, moves=counts.moves, flowlets=counts.flowlets)
    # a flow's first flowlet takes the kernel's ECMP next hop (bpf_fib_lookup)
    [ecmp_link] = [h.src_ifname for h in topo.path("h0", "h1", SPORT) if h.src == "l0"]
    assert used == [ecmp_link], burst_links
    assert counts.new_flows == 1 and counts.ecmp_misses == 0
    # every spaced packet starts a flowlet (the first after the sleep too), drawn at random
    assert counts.flowlets == spaced
    assert counts.moves >= 1
    assert sum(1 for n in spaced_links.values() if n) >= 2, spaced_links


def test_adaptive_avoids_the_uplink_whose_queue_is_full(fabric_env: str) -> None:
    packets = 200
    with _fabric(fabric_env, mode="adaptive") as (live, topo):
        ns = live.netns_of("l0")
        assert isinstance(live.marker, EbpfMarker)
        state = BpfMap(live.marker.maps[(ns, "l0-s0-0")].state_map_id)
        try:
            # 10 MB queued "now + 60 s": a queue stamped in the future does not drain (the
            # marker and the balancer never move time backwards), so it stays full.
            raw = bytearray(ebpf.STATE.size)
            struct.pack_into("=QQ", raw, 8, time.monotonic_ns() + 60 * 10**9, 10_000_000)
            state.update(ebpf.KEY0, bytes(raw))
            carried = _carried(live, lambda: _send(live, topo, packets), packets)
            state.update(ebpf.KEY0, bytes(ebpf.STATE.size))
        finally:
            state.close()
    assert carried["l0-s0-0"] == 0, carried
    assert all(carried[dev] > 0 for dev in UPLINKS[1:]), carried
    assert sum(carried.values()) == packets


def test_spray_stops_using_a_dead_cable_and_takes_it_back(fabric_env: str) -> None:
    packets = 200
    with _fabric(fabric_env, mode="spray", spray_order="round_robin") as (live, topo):
        cable = cable_named(topo, "l0-s0-0")
        live.set_cable(cable, up=False)
        down = _carried(live, lambda: _send(live, topo, packets), packets)
        live.reroute([cable])
        rerouted = _carried(live, lambda: _send(live, topo, packets), packets)
        live.set_cable(cable, up=True)
        live.reroute([])
        back = _carried(live, lambda: _send(live, topo, packets), packets)
    for carried in (down, rerouted):
        assert carried["l0-s0-0"] == 0 and sum(carried.values()) == packets, carried
        assert all(carried[dev] >= packets // 3 - 1 for dev in UPLINKS[1:]), carried
    assert all(n >= packets // 4 - 1 for n in back.values()), back


def _bpffs() -> set[str]:
    return {str(p) for p in Path("/sys/fs/bpf").rglob("*")}


def test_teardown_leaves_nothing_behind(fabric_env: str) -> None:
    pins = _bpffs()
    with _fabric(fabric_env, mode="adaptive", adaptive_granularity="flowlet") as (live, _):
        assert live.balancer is not None
        names = set(live.netns.values())
        progs = {p.prog_id for sw in live.balancer.switches.values() for p in sw.programs}
        assert len(progs) == 10  # every port of both leaves
        assert live.metadata()["load_balancing"]["tiers"]["leaf"]["mode"] == "adaptive"
    _assert_gone(names, progs)
    assert _bpffs() == pins, "a pin was left in /sys/fs/bpf"
    assert not state_path().exists()


def test_a_failure_while_attaching_releases_the_fabric(
    fabric_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def vanished(prog_ids: list[int]) -> dict[int, dict[str, int]]:
        raise EnvironmentProblem("balancer programs vanished after attach (test)")

    monkeypatch.setattr(program, "map_ids", vanished)
    topo = _topology(mode="spray")
    pins = _bpffs()
    with pytest.raises(EnvironmentProblem, match="vanished"):
        bring_up(topo, rate_scale=RATE_SCALE, delay_scale=TDF, prefix=fabric_env)
    assert not {n for n in existing_netns() if n.startswith(fabric_env)}
    assert _bpffs() == pins
    assert not state_path().exists()


def _assert_gone(names: set[str], progs: set[int]) -> None:
    assert not names & existing_netns()
    # programs are freed once their namespace's cleanup has run (asynchronously)
    deadline = time.monotonic() + 10
    while progs & ebpf.loaded_prog_ids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not progs & ebpf.loaded_prog_ids()
