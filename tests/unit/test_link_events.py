"""The link-event impairment as data: which routes a converged fabric has without a cable, the
order of a run's actions, and which flows crossed a cable while it was down."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from emulator.backends.link_events import LinkEventRunner, flows_crossing, plan_actions, resolve
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from fabrics.spec import ClosSpec, LinkEventSpec
from fabrics.topology import Cable, Route, build_clos, cable_named, routes_without

SPEC = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2)


def _gateways(routes: Mapping[str, tuple[Route, ...]], node: str) -> list[list[str]]:
    return [[h.peer for h in r.nexthops] for r in routes[node]]


def test_routes_without_a_cable_go_around_it() -> None:
    topo = build_clos(SPEC)
    assert _gateways(topo.routes, "l1") == [["s0", "s1"]]  # toward l0's prefix
    down = cable_named(topo, "l0-s0")
    assert down is cable_named(topo, "s0-l0")  # either end names it
    routes = routes_without(topo, [down])
    assert _gateways(routes, "l1") == [["s1"]]  # l1 no longer sends l0's traffic to s0
    assert _gateways(routes, "l0") == [["s1"]]
    assert _gateways(routes, "s0") == [["l1"], ["l1"]]  # s0 reaches l0 the long way round
    both = routes_without(topo, [down, cable_named(topo, "l0-s1")])
    assert _gateways(both, "l1") == [] and _gateways(both, "s1") == [["l1"]]  # l0 is cut off
    assert routes_without(topo, []) == topo.routes


def test_unknown_ports_are_refused_by_name() -> None:
    topo = build_clos(SPEC)
    with pytest.raises(ValueError, match="no switch interface 'l7-s0'"):
        cable_named(topo, "l7-s0")
    with pytest.raises(ValueError, match="no switch interface 'eth0'"):
        cable_named(topo, "eth0")  # a host's side is not a name: every host has one
    spec = ClosSpec(
        hosts_per_leaf=2, leaves=2, spines=2, link_events=(LinkEventSpec("l0-s9", 5.0),)
    )
    with pytest.raises(ScenarioError, match=r"fabric\.link_events\[0\]\.port: no switch"):
        resolve(spec, topo)


def test_actions_run_in_time_order_and_a_reroute_after_the_up_is_skipped() -> None:
    events = [
        LinkEventSpec("l0-s0", down_at_us=10, up_at_us=50, reroute_after_us=5),
        LinkEventSpec("l1-s1", down_at_us=20, up_at_us=22, reroute_after_us=5),
        LinkEventSpec("l0-h1", down_at_us=30),
    ]
    got = [(round(a.at_s * 1e6), a.kind, a.event) for a in plan_actions(events)]
    assert got == [
        (10, "down", 0),
        (15, "reroute", 0),
        (20, "down", 1),
        (22, "up", 1),  # came back before its reroute was due
        (30, "down", 2),
        (30, "reroute", 2),
        (50, "up", 0),
    ]


class _Fabric:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_cable(self, cable: Cable, up: bool) -> None:
        self.calls.append(("up" if up else "down", cable.a.ifname))

    def reroute(self, down: object) -> None:
        self.calls.append(("reroute", sorted(c.a.ifname for c in down)))  # type: ignore[attr-defined]


def test_the_runner_keeps_the_set_of_dead_cables_and_which_flows_crossed_them() -> None:
    topo = build_clos(SPEC)
    events = [LinkEventSpec("l0-s0", down_at_us=10, up_at_us=50)]
    fabric = _Fabric()
    runner = LinkEventRunner(fabric, events, [cable_named(topo, "l0-s0")], tdf=1.0)
    for action, now in zip(runner.actions, (10e-6, 11e-6, 50e-6), strict=True):
        runner.apply(action, now)
    assert fabric.calls == [
        ("down", "l0-s0"),
        ("reroute", ["l0-s0"]),
        ("up", "l0-s0"),
        ("reroute", []),
    ]
    windows = runner.down_windows(end_s=1.0)
    assert [(w[1], w[2]) for w in windows] == [(10e-6, 50e-6)]
    # h0 -> h2 crosses a spine; find source ports whose path takes s0 and s1
    on_s0 = next(p for p in range(49152, 49300) if topo.path("h0", "h2", p)[1].dst == "s0")
    on_s1 = next(p for p in range(49152, 49300) if topo.path("h0", "h2", p)[1].dst == "s1")

    def flow(sport: int, start: float, end: float | None, ctype: str = "ALL_REDUCE") -> dict:
        return {
            "src_rank": 0,
            "dst_rank": 2,
            "udp_sport": sport,
            "start_s": start,
            "end_s": end,
            "collective_type": ctype,
        }

    flows = [
        flow(on_s0, 0.0, 20e-6),  # in flight when it went down: crossed
        flow(on_s0, 60e-6, 70e-6),  # after it came back
        flow(on_s1, 0.0, 100e-6),  # other spine
        flow(on_s0, 40e-6, None, "ALL_TO_ALL"),  # never finished
        {**flow(on_s0, 0.0, 1.0), "src_rank": 0, "dst_rank": 1},  # same leaf: no spine
    ]
    assert flows_crossing(topo, windows, flows) == {"ALL_REDUCE": 1, "ALL_TO_ALL": 1}


def test_link_events_in_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "workload: {generate: {kind: allreduce}}\n"
        "fabric:\n  kind: clos\n  link_events:\n"
        "    - {port: l0-s0, down_at_us: 100, up_at_us: 300, reroute_after_us: 20}\n"
        "    - {port: l1-h3, down_at_us: 50}\n"
    )
    fabric = load_scenario(path).fabric
    assert isinstance(fabric, ClosSpec)
    assert fabric.link_events == (
        LinkEventSpec("l0-s0", 100.0, 300.0, 20.0),
        LinkEventSpec("l1-h3", 50.0),
    )
    path.write_text(
        "workload: {generate: {kind: allreduce}}\n"
        "fabric: {kind: clos, link_events: [{port: l0-s0, down_at_us: 100, up_at_us: 100}]}\n"
    )
    with pytest.raises(ScenarioError, match="up_at_us: 100 must be after down_at_us 100"):
        load_scenario(path)
