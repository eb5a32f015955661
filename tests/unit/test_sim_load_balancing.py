"""Per-tier load balancing at a simulated switch (emulator/sim/balance.py, Switch in
emulator/sim/fabric.py), each mode's choice against hand-computed cases.

The fabric: two leaves with one host each and four spines, so leaf l0 reaches h1 over four
equal-cost uplinks, l0-s0 .. l0-s3 in the route's next-hop order (sorted by gateway: the cables
are numbered spine by spine, fabrics/topology.py build_clos). Frames are routed with
Switch.egress_for (what receive sends to) at a simulated time set by hand.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from emulator.sim.balance import BALANCERS, Adaptive, Flowlet, Spray
from emulator.sim.fabric import SimFabric, SimFabricParams, Switch, build_fabric, derive_seed
from emulator.sim.port import Frame
from emulator.sim.replay import SimReplay
from emulator.transport.packets import ROCEV2_UDP_PORT
from fabrics.spec import ClosSpec, LoadBalancingSpec, TierSpec
from fabrics.topology import Topology, build_clos, cable_named

UPLINKS = ("l0-s0", "l0-s1", "l0-s2", "l0-s3")
GAP_US = 50.0
GAP_S = GAP_US * 1e-6


def fabric(mode: str = "ecmp", *, seed: int = 1, draw_seed: int = 0, **lb: object) -> SimFabric:
    balancing = LoadBalancingSpec(mode=mode, **lb)  # type: ignore[arg-type]
    spec = ClosSpec(hosts_per_leaf=1, leaves=2, spines=4, leaf=TierSpec(load_balancing=balancing))
    return build_fabric(
        build_clos(spec),
        SimFabricParams(draw_seed=draw_seed),
        seed=seed,
        events=SimReplay.event_list(),
    )


def frame(sport: int = 49152, *, src: str = "h0", dst: str = "h1", control: bool = False) -> Frame:
    return Frame(src, dst, sport, 1000, 0, b"", control)


def hop(switch: Switch, f: Frame, at: float | None = None) -> str:
    if at is not None:
        switch.sim.now = at
    port = switch.egress_for(f)
    assert port is not None
    return port.name.split(":")[1]


def ecmp_uplink(topology: Topology, f: Frame) -> str:
    """The uplink the kernel's hash (Topology.path) puts this data 5-tuple on at l0."""
    assert not f.control and f.src == "h0"
    return topology.path(f.src, f.dst, f.sport)[1].src_ifname


def test_registry_and_the_tiers_that_balance() -> None:
    assert {"spray": Spray, "flowlet": Flowlet, "adaptive": Adaptive} == BALANCERS
    net = fabric("spray")
    assert isinstance(net.switches["l0"].balancer, Spray)
    assert net.switches["l1"].balancer is not None
    # spines and the default tier keep the ECMP hash path
    assert all(net.switches[f"s{i}"].balancer is None for i in range(4))
    assert all(s.balancer is None for s in fabric().switches.values())
    # the candidates are the route's next hops, in its order
    l0 = net.switches["l0"]
    assert tuple(p.name for p in l0.next_hops("h1")) == tuple(f"l0:{u}" for u in UPLINKS)
    assert tuple(p.name for p in l0.next_hops("h0")) == ("l0:l0-h0",)


def test_ecmp_routes_each_source_port_by_its_own_hash() -> None:
    """The ECMP cache is keyed by the 5-tuple, not by the queue pair's hash alone: packets of
    one QP that vary their source port (per-packet entropy) keep the QP's mhash (the host
    computes it once) but each takes the hash of its own source port."""
    net = fabric()
    l0 = net.switches["l0"]
    topology = net.topology
    src_ip, dst_ip = topology.host_address("h0"), topology.host_address("h1")
    qp_hash = topology.flow_hash(src_ip, dst_ip, 49152)
    seen = set()
    for sport in range(49152, 49152 + 64):
        f = Frame("h0", "h1", sport, 1000, 0, b"", False, qp_hash)
        assert hop(l0, f) == ecmp_uplink(topology, f)
        seen.add(hop(l0, f))
        # an ACK back (from 4791 to the source port) hashes the same at l1 (symmetric hash)
        ack = Frame("h1", "h0", sport, 100, 0, b"", True, qp_hash)
        l1_up = topology.path("h1", "h0", ROCEV2_UDP_PORT, sport)[1].src_ifname
        assert hop(net.switches["l1"], ack) == l1_up
    assert seen == set(UPLINKS)  # 64 ports spread over all four (the hash is not stuck)


def test_round_robin_visits_every_next_hop_in_turn_per_destination() -> None:
    l0 = fabric("spray", spray_order="round_robin").switches["l0"]
    hops = [hop(l0, frame(49152 + i % 3)) for i in range(9)]  # any flows toward h1
    assert hops == [*UPLINKS, *UPLINKS, "l0-s0"]
    # a control frame toward h1 (an ACK of h1's QP) takes the next turn: one rule for all
    assert hop(l0, frame(control=True)) == "l0-s1"
    # one next hop toward the local host: no turn is taken
    assert hop(l0, frame(src="h1", dst="h0")) == "l0-h0"
    assert hop(l0, frame()) == "l0-s2"


def test_random_spray_is_even_and_reproducible_with_its_seed() -> None:
    n = 4000

    def draws(seed: int, draw_seed: int = 0) -> list[str]:
        l0 = fabric("spray", seed=seed, draw_seed=draw_seed).switches["l0"]
        return [hop(l0, frame()) for _ in range(n)]

    first = draws(1)
    counts = Counter(first)
    assert set(counts) == set(UPLINKS)
    # binomial(4000, 1/4): mean 1000, sigma 27; 5 sigma either side
    assert all(abs(c - n / 4) < 5 * (n * 0.25 * 0.75) ** 0.5 for c in counts.values()), counts
    assert draws(1) == first
    assert draws(2) != first
    assert draws(1, draw_seed=1) != first  # sim.draw_seed salts the switches' draws too
    # exactly the switch's own generator: derive_seed(run.seed, switch, "balance", draw_seed)
    rng = random.Random(derive_seed(1, "l0", "balance"))
    assert first[:50] == [UPLINKS[rng.randrange(4)] for _ in range(50)]


def test_flowlet_keeps_its_hop_within_the_gap_and_may_move_after_it() -> None:
    net = fabric("flowlet", flowlet_gap_us=GAP_US)
    l0 = net.switches["l0"]
    rng = random.Random(derive_seed(1, "l0", "balance"))  # the switch's draws, replayed
    f = frame(49160)
    first = ecmp_uplink(net.topology, f)
    assert hop(l0, f, 0.0) == first  # first packet: the ECMP hash's choice, no draw
    assert hop(l0, f, GAP_S) == first  # exactly the gap later: not more than it, no move
    t = GAP_S
    for _ in range(20):  # packets just within the gap: never move
        t += 0.99 * GAP_S
        assert hop(l0, f, t) == first
    # another flow's packets do not count as this flow's
    other = frame(49161)
    assert hop(l0, other, t + 0.9 * GAP_S) == ecmp_uplink(net.topology, other)
    # past the gap: a new flowlet, a uniform draw (it may repeat the hop)
    expected = []
    for _ in range(40):
        t += GAP_S * 1.01
        expected.append(UPLINKS[rng.randrange(4)])
        assert hop(l0, f, t) == expected[-1]
        assert hop(l0, f, t + GAP_S / 2) == expected[-1]  # and keeps it within the flowlet
        t += GAP_S / 2
    assert set(expected) == set(UPLINKS)  # every hop taken, and moves did happen
    assert expected[-1] != first
    # the other direction of the same ports is its own flow: its first packet takes the hash
    # (symmetric: the data's), not the data flow's current hop
    ack = frame(49160, control=True)
    assert hop(l0, ack, t) == first
    assert hop(l0, f, t) == expected[-1]


def test_flowlet_moves_off_a_hop_its_route_lost_even_within_the_gap() -> None:
    net = fabric("flowlet", flowlet_gap_us=GAP_US)
    l0 = net.switches["l0"]
    f = frame(49160)
    before = hop(l0, f, 0.0)
    kept = [u for u in UPLINKS if u != before]
    down = cable_named(net.topology, before)
    net.reroute(net.switches, [down])
    assert tuple(p.name.split(":")[1] for p in l0.next_hops("h1")) == tuple(kept)
    after = hop(l0, f, GAP_S / 10)
    assert after in kept
    assert hop(l0, f, GAP_S / 5) == after


def test_adaptive_packet_takes_the_least_queued_next_hop() -> None:
    l0 = fabric("adaptive", adaptive_granularity="packet").switches["l0"]
    ports = l0.next_hops("h1")

    def queues(*sizes: int) -> None:
        for port, size in zip(ports, sizes, strict=True):
            port.queued_bytes = size

    queues(3000, 1000, 2000, 5000)
    assert hop(l0, frame()) == "l0-s1"
    queues(3000, 1000, 200, 5000)
    assert hop(l0, frame()) == "l0-s2"  # the same flow moves at once: per packet
    # ties: a seeded draw among the tied (0 and 2), never the others
    queues(0, 500, 0, 500)
    rng = random.Random(derive_seed(1, "l0", "balance"))
    tied = [hop(l0, frame()) for _ in range(200)]
    assert tied == [("l0-s0", "l0-s2")[rng.randrange(2)] for _ in range(200)]
    assert set(tied) == {"l0-s0", "l0-s2"}


def test_adaptive_flowlet_chooses_at_flowlet_starts_only() -> None:
    l0 = fabric("adaptive", adaptive_granularity="flowlet", flowlet_gap_us=GAP_US).switches["l0"]
    ports = l0.next_hops("h1")

    def queues(*sizes: int) -> None:
        for port, size in zip(ports, sizes, strict=True):
            port.queued_bytes = size

    f = frame()
    queues(3000, 1000, 2000, 5000)
    assert hop(l0, f, 0.0) == "l0-s1"  # a first packet starts a flowlet: least queued
    queues(3000, 9000, 2000, 0)
    assert hop(l0, f, GAP_S) == "l0-s1"  # within the flowlet: stays, whatever the queues
    assert hop(l0, f, 2 * GAP_S) == "l0-s1"
    assert hop(l0, f, 3.5 * GAP_S) == "l0-s3"  # after a gap: the least queued now
    queues(0, 9000, 2000, 100)
    assert hop(l0, f, 4 * GAP_S) == "l0-s3"


@pytest.mark.parametrize("mode", ["spray", "flowlet", "adaptive"])
def test_no_route_and_single_next_hops_need_no_choice(mode: str) -> None:
    net = fabric(mode)
    l0 = net.switches["l0"]
    assert hop(l0, frame(src="h1", dst="h0")) == "l0-h0"
    net.reroute(net.switches, [cable_named(net.topology, u) for u in UPLINKS])
    assert l0.egress_for(frame()) is None
    assert l0.next_hops("h1") == ()
