"""The balancer's maps built from a Topology, packed as balancer.c reads them (no root)."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import struct
from pathlib import Path

import pytest

from emulator.errors import ScenarioError
from fabrics.balance.live import check_balancing
from fabrics.balance.maps import (
    COUNTERS,
    MAX_NEXTHOPS,
    MAX_QUEUE_SLOTS,
    MAX_ROUTES,
    BalanceCounters,
    BalanceParams,
    Candidate,
    drain_q24,
    hop_capacity,
    nexthop_sets,
    parse_cpu_list,
    queue_slots,
    route_key,
    route_slots,
    set_bytes,
)
from fabrics.spec import ClosSpec, EcnSpec, LoadBalancingSpec, TierSpec
from fabrics.topology import build_clos, cable_named, routes_without

SOURCE = Path(__file__).parents[2] / "fabrics" / "balance" / "balancer.c"
NET = ipaddress.IPv4Network
IP = ipaddress.IPv4Address
RATE = 1e9  # wall b/s of every port below


def _clos(**tiers: TierSpec) -> ClosSpec:
    """2 leaves, 2 spines, 2 parallel links, a host per leaf."""
    return ClosSpec(hosts_per_leaf=1, leaves=2, spines=2, parallel_links=2, **tiers)


def _rates(node: str) -> dict[str, float]:
    topo = build_clos(_clos())
    return {p.ifname: RATE for p in topo.ports[node]}


def test_the_leafs_one_route_has_its_four_uplinks_by_hand() -> None:
    # Cables in build order: l0-h0, l1-h1, then per spine per leaf per link a /31 from
    # 10.128.0.0: l0-s0-0 .0/.1, l0-s0-1 .2/.3, l1-s0-* .4-.7, l0-s1-0 .8/.9, l0-s1-1 .10/.11.
    topo = build_clos(_clos())
    routes = topo.routes["l0"]
    sets = nexthop_sets(routes, route_slots(routes), queue_slots(routes), _rates("l0"))
    assert [(s.prefix, s.route_slot) for s in sets] == [(NET("10.0.1.0/24"), 0)]
    assert sets[0].hops == (
        Candidate("l0-s0-0", IP("10.128.0.1"), 0, RATE),
        Candidate("l0-s0-1", IP("10.128.0.3"), 1, RATE),
        Candidate("l0-s1-0", IP("10.128.0.9"), 2, RATE),
        Candidate("l0-s1-1", IP("10.128.0.11"), 3, RATE),
    )


def test_a_spine_chooses_among_the_parallel_links_to_each_leaf() -> None:
    topo = build_clos(_clos())
    routes = topo.routes["s0"]
    sets = nexthop_sets(routes, route_slots(routes), queue_slots(routes), _rates("s0"))
    assert [
        (s.prefix, [(h.ifname, str(h.gateway), h.queue_slot) for h in s.hops]) for s in sets
    ] == [
        (NET("10.0.0.0/24"), [("s0-l0-0", "10.128.0.0", 0), ("s0-l0-1", "10.128.0.2", 1)]),
        (NET("10.0.1.0/24"), [("s0-l1-0", "10.128.0.4", 2), ("s0-l1-1", "10.128.0.6", 3)]),
    ]


def test_packed_entry_is_the_c_layout() -> None:
    topo = build_clos(_clos())
    routes = topo.routes["l0"]
    [entry] = nexthop_sets(routes, route_slots(routes), queue_slots(routes), _rates("l0"))
    ifindex = {"l0-s0-0": 3, "l0-s0-1": 4, "l0-s1-0": 5, "l0-s1-1": 6}
    assert entry.key() == struct.pack("<I", 24) + bytes([10, 0, 1, 0])
    value = entry.value(ifindex, capacity=4)
    assert len(value) == set_bytes(4) == 8 + 4 * 24
    assert struct.unpack_from("<II", value) == (4, 0)
    # 1 Gb/s is 0.125 bytes per ns: 2^21 with 24 fraction bits
    assert drain_q24(RATE) == 1 << 21
    third = struct.unpack_from("<I4sIIQ", value, 8 + 2 * 24)
    assert third == (5, bytes([10, 128, 0, 9]), 2, 0, 1 << 21)
    # a wider program leaves the rest zero; a narrower one cannot hold the route
    assert entry.value(ifindex, capacity=8)[len(value) :] == bytes(4 * 24)
    with pytest.raises(ValueError, match="holds 2"):
        entry.value(ifindex, capacity=2)


def test_dead_ports_leave_the_set_and_a_prefix_without_route_is_emptied() -> None:
    topo = build_clos(_clos())
    routes = topo.routes["l0"]
    slots, queues = route_slots(routes), queue_slots(routes)
    [entry] = nexthop_sets(routes, slots, queues, _rates("l0"), dead={"l0-s0-0"})
    assert [h.ifname for h in entry.hops] == ["l0-s0-1", "l0-s1-0", "l0-s1-1"]
    assert [h.queue_slot for h in entry.hops] == [1, 2, 3]  # slots never move
    # what the control plane installs once the cable is out of the graph: the same three
    rerouted = routes_without(topo, [cable_named(topo, "l0-s0-0")])["l0"]
    [after] = nexthop_sets(rerouted, slots, queues, _rates("l0"))
    assert after.hops == entry.hops
    [gone] = nexthop_sets((), slots, queues, _rates("l0"), gone=[NET("10.0.1.0/24")])
    assert (gone.prefix, gone.route_slot, gone.hops) == (NET("10.0.1.0/24"), 0, ())
    assert struct.unpack_from("<II", gone.value({}, 4)) == (0, 0)  # count 0: the stack decides


def test_route_key_is_prefix_length_then_network_address() -> None:
    assert route_key(NET("10.0.3.0/24")) == struct.pack("<I", 24) + bytes([10, 0, 3, 0])


@pytest.mark.parametrize(
    ("widest", "capacity"), [(1, 2), (2, 2), (3, 4), (4, 4), (5, 8), (16, 16), (64, 64)]
)
def test_hop_capacity_is_the_widest_route_rounded_up_to_a_power_of_two(
    widest: int, capacity: int
) -> None:
    assert hop_capacity(widest) == capacity


def test_hop_capacity_refuses_more_than_the_program_holds() -> None:
    with pytest.raises(ValueError, match="at most 64"):
        hop_capacity(MAX_NEXTHOPS + 1)


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        (LoadBalancingSpec(mode="spray"), (1, 0, 0, 0)),
        (LoadBalancingSpec(mode="spray", spray_order="round_robin"), (1, 1, 0, 0)),
        (LoadBalancingSpec(mode="flowlet"), (1, 0, 1, 1)),
        (LoadBalancingSpec(mode="adaptive"), (1, 2, 0, 0)),
        (LoadBalancingSpec(mode="adaptive", adaptive_granularity="flowlet"), (1, 2, 1, 0)),
    ],
)
def test_params_pack_mode_and_the_gap_in_wall_ns(
    spec: LoadBalancingSpec, fields: tuple[int, ...]
) -> None:
    spec = dataclasses.replace(spec, flowlet_gap_us=250.0)
    packed = BalanceParams.of(spec, delay_scale=10.0).pack()
    # enabled, choice, per_flowlet, first_ecmp; 250 us of target time at TDF 10 is 2.5 ms
    assert struct.unpack("<IIIIQ", packed) == (*fields, 2_500_000)


def test_ecmp_has_no_program_params() -> None:
    with pytest.raises(ValueError, match=r"load_balancing\.mode: ecmp"):
        BalanceParams.of(LoadBalancingSpec(), 1.0)


def test_counters_sum_over_cpus() -> None:
    raw = COUNTERS.pack(5, 1, 0, 0, 0, 0) + COUNTERS.pack(7, 2, 1, 3, 2, 0)
    assert BalanceCounters.unpack_per_cpu(raw, 2) == BalanceCounters(12, 3, 1, 3, 2, 0)
    assert BalanceCounters(1, 2) + BalanceCounters(3, 4, 5) == BalanceCounters(4, 6, 5)


@pytest.mark.parametrize(("text", "cpus"), [("0\n", 1), ("0-1\n", 2), ("0,2-5", 5), ("0-63", 64)])
def test_possible_cpu_list(text: str, cpus: int) -> None:
    assert parse_cpu_list(text) == cpus


def test_bounds_match_the_c_source() -> None:
    source = SOURCE.read_text()

    def define(name: str) -> int:
        found = re.search(rf"#define {name} (\d+)", source)
        assert found, name
        return int(found.group(1))

    assert define("MAX_NEXTHOPS") == MAX_NEXTHOPS
    assert define("MAX_QUEUE_SLOTS") == MAX_QUEUE_SLOTS
    assert define("MAX_ROUTES") == MAX_ROUTES


def _adaptive(ecn: bool = True) -> TierSpec:
    return TierSpec(load_balancing=LoadBalancingSpec(mode="adaptive"), ecn=EcnSpec(enabled=ecn))


def test_adaptive_needs_the_ebpf_marker() -> None:
    topo = build_clos(_clos(leaf=_adaptive()))
    check_balancing(topo, "ebpf")
    with pytest.raises(ScenarioError, match=r"^fabric\.leaf\.load_balancing\.mode: adaptive"):
        check_balancing(topo, "red")


def test_adaptive_needs_a_marker_on_every_candidate_port() -> None:
    topo = build_clos(_clos(leaf=_adaptive(ecn=False)))
    with pytest.raises(ScenarioError, match=r"^fabric\.leaf\.ecn\.enabled: .* l0:l0-s0-0"):
        check_balancing(topo, "ebpf")
    # a port that drops at random runs the marker program too, so its queue is there
    lossy = dataclasses.replace(_adaptive(ecn=False), loss_probability=0.01)
    check_balancing(build_clos(_clos(leaf=lossy)), "ebpf")


def test_too_many_next_hops_is_refused_naming_the_key() -> None:
    spec = ClosSpec(
        hosts_per_leaf=1,
        leaves=2,
        spines=65,
        leaf=TierSpec(load_balancing=LoadBalancingSpec(mode="spray")),
    )
    with pytest.raises(ScenarioError, match=r"^fabric\.leaf\.load_balancing\.mode: spray .* 65"):
        check_balancing(build_clos(spec), "ebpf")
    check_balancing(build_clos(dataclasses.replace(spec, leaf=TierSpec())), "ebpf")  # ecmp: any
