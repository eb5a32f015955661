"""Source ports that place queue pairs on ECMP paths (balanced), and the per-router hash seeds
that keep a spine from repeating its leaf's choice (no polarization)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from emulator.errors import InputError
from emulator.schedule.fabric import clos_path
from emulator.schedule.sports import SPORT_POLICIES, BalancedSports, SportPolicy
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos

# The shipped study fabric: 2 leaves x 8 hosts, 2 spines, 4 parallel 400G links per leaf-spine.
CLOS = ClosSpec(
    hosts_per_leaf=8,
    leaves=2,
    spines=2,
    parallel_links=4,
    host_link_gbps=400,
    fabric_link_gbps=400,
)
LOW, HIGH = 0xC000, 0xFFFF
# Every data-parallel pair (i, i + 8) both ways, two queue pairs per peer: 16 QPs leave each leaf.
CROSSING = [(i, i + 8, q) for i in range(8) for q in range(2)] + [
    (i + 8, i, q) for i in range(8) for q in range(2)
]


def _fabric_loads(policy: SportPolicy, keys: list[tuple[int, int, int]]) -> Counter[str]:
    """QPs per directed switch-to-switch link (host links are the same for every choice)."""
    path = clos_path(CLOS, 16)
    loads: Counter[str] = Counter()
    for key in keys:
        for link, _rate in path(key[0], key[1], policy(*key)):
            name = str(link)  # "l0:l0-s1-2->s1"; host links start or end at an "h" node
            if not name.startswith("h") and "->h" not in name:
                loads[name] += 1
    return loads


def test_one_seed_everywhere_polarizes_and_a_seed_per_router_does_not() -> None:
    """Cisco's CEF polarization: a router hashing like the one before it repeats its choice."""

    def paths(spec: ClosSpec) -> set[tuple[str, ...]]:
        topo = build_clos(spec)
        return {
            tuple(link.name for link in topo.path("h0", "h8", sport))
            for sport in range(LOW, LOW + 4000)
        }

    assert len(paths(CLOS)) == 32  # 8 uplinks x 4 spine downlinks: every path is used
    polarized = paths(dataclasses.replace(CLOS, ecmp_seed_per_router=False))
    assert len(polarized) == 8  # each uplink leads to one downlink: half the downlinks idle
    downlinks = {p[2] for p in polarized}
    assert len(downlinks) == 4  # of the 8 spine -> l1 links


def test_balanced_fills_every_uplink_and_downlink_evenly_where_the_hash_collides() -> None:
    balanced = BalancedSports(LOW, HIGH, 0, clos_path(CLOS, 16))
    loads = _fabric_loads(balanced, CROSSING)
    # 16 QPs per direction over 8 uplinks and 8 spine downlinks: exactly 2 on each of 32 links
    assert len(loads) == 32 and set(loads.values()) == {2}
    hashed = _fabric_loads(SPORT_POLICIES["hash"](LOW, HIGH, 0, None), CROSSING)
    assert max(hashed.values()) >= 3 and len(hashed) < 32  # the plain hash collides here


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_balanced_is_even_in_any_order_and_stable_per_queue_pair(seed: int) -> None:
    path = clos_path(CLOS, 16)
    forward = BalancedSports(LOW, HIGH, seed, path)
    backward = BalancedSports(LOW, HIGH, seed, path)
    assert set(_fabric_loads(forward, CROSSING).values()) == {2}
    assert set(_fabric_loads(backward, CROSSING[::-1]).values()) == {2}
    ports = [forward(*key) for key in CROSSING]
    assert ports == [forward(*key) for key in CROSSING]  # a QP keeps its port
    assert all(LOW <= port <= HIGH for port in ports)


def test_seeds_draw_different_but_equally_balanced_placements() -> None:
    path = clos_path(CLOS, 16)
    one, two = BalancedSports(LOW, HIGH, 1, path), BalancedSports(LOW, HIGH, 2, path)
    assert [one(*k) for k in CROSSING] != [two(*k) for k in CROSSING]


def test_balanced_without_a_fabric_is_refused() -> None:
    with pytest.raises(InputError, match="sport_policy: balanced needs the fabric's paths"):
        BalancedSports(LOW, HIGH, 0, None)


def test_the_balanced_probes_leave_nothing_behind_in_the_shared_topology() -> None:
    """Balanced ports try up to 256 paths per queue pair: a probe computes its hashes and keeps
    none (the shared topology once held every probe's hash, 74k entries and 17 MB in moe_mix),
    with the same path as a call that keeps them."""
    from fabrics.topology import shared_clos

    topology = shared_clos(CLOS)  # the one clos_path reads
    topology._hashes.clear()  # a cache: whatever other tests left in it
    policy = BalancedSports(LOW, HIGH, path=clos_path(CLOS, 16))
    ports = [policy(*key) for key in CROSSING]
    assert not topology._hashes
    hosts = topology.hosts
    for (src, dst, _), sport in zip(CROSSING, ports, strict=True):
        probe = topology.path(hosts[src], hosts[dst], sport, remember=False)
        assert probe == topology.path(hosts[src], hosts[dst], sport)  # this one keeps its hashes
    assert topology._hashes
    # one address object per host, whatever the number of calls
    assert topology.host_address(hosts[3]) is topology.host_address(hosts[3])
