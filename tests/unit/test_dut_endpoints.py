"""Many endpoints behind one DUT port: the per-rank view of fabric.ranks_per_interface, the
ideal model's shared ports, and the refusal of traffic that would never cross the DUT."""

from __future__ import annotations

import pytest

from emulator.errors import ScenarioError
from emulator.planning.workload import plan_workload
from emulator.scenario.model import Scenario
from emulator.schedule.fabric import describe_fabric, path_for_fabric
from emulator.traffic.spec import TrafficPattern
from fabrics.dut import check_destination
from fabrics.spec import DutSpec


def spec(**changes: object) -> DutSpec:
    base: dict[str, object] = {
        "interfaces": ("p0", "p1"),
        "addresses": ("10.100.0.2/20", "10.101.0.2/20"),
        "gateways": ("10.100.0.1", "10.101.0.1"),
        "routes": ("10.96.0.0/11",),
        "allowlist": ("10.96.0.0/11",),
        "ranks_per_interface": 1024,
    }
    base.update(changes)
    return DutSpec(**base)  # type: ignore[arg-type]


def test_ranks_take_consecutive_addresses_behind_their_port() -> None:
    s = spec()
    assert s.rank_count == 2048
    assert [s.rank_cidr(r) for r in (0, 1, 1023)] == [
        "10.100.0.2/20",
        "10.100.0.3/20",
        "10.100.4.1/20",
    ]
    assert s.rank_cidr(1024) == "10.101.0.2/20"
    assert (s.rank_interface(1023), s.rank_interface(1024)) == ("p0", "p1")
    assert (s.rank_gateway(5), s.rank_gateway(2000)) == ("10.100.0.1", "10.101.0.1")
    check_destination(s, 2047, "10.101.4.1")  # every rank address is allowed
    assert "2 ports at 10 Gb/s, 1024 ranks per port" in describe_fabric(s)


def test_a_port_prefix_too_small_or_shared_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match=r"addresses: 10.100.0.2/24 leaves no room for 1024"):
        spec(addresses=("10.100.0.2/24", "10.101.0.2/20"))
    with pytest.raises(ValueError, match=r"the last would be 10\.100\.0\.255"):
        spec(addresses=("10.100.0.2/24", "10.101.0.2/24"), ranks_per_interface=254)
    spec(addresses=("10.100.0.2/24", "10.101.0.2/24"), ranks_per_interface=253)
    with pytest.raises(ValueError, match=r"ranks_per_interface: .* \(namespaces: true\)"):
        spec(namespaces=False, gateways=())


def test_ranks_of_one_port_share_its_links_in_the_ideal_model() -> None:
    path = path_for_fabric(spec(ranks_per_interface=4), 8)
    assert path(0, 5, 1) == [(("up", 0), 10e9), (("down", 1), 10e9)]
    assert path(3, 4, 1) == path(0, 7, 2)  # any rank of port 0 to any of port 1: one pair
    assert path(0, 3, 1) == []  # inside the port's namespace: no link


def test_traffic_between_ranks_of_one_port_is_refused() -> None:
    fabric = spec(ranks_per_interface=4)
    crossing = TrafficPattern(name="x", kind="pairs", pairs=((0, 4),), bytes_per_pair=4096)
    same = TrafficPattern(name="y", kind="pairs", pairs=((0, 4), (1, 2)), bytes_per_pair=4096)
    plan_workload(Scenario(traffic=(crossing,), fabric=fabric), None, 8, 10e9)
    with pytest.raises(
        ScenarioError, match=r"traffic\[0\] \(y\): ranks 1 and 2 share interface p0"
    ):
        plan_workload(Scenario(traffic=(same,), fabric=fabric), None, 8, 10e9)
