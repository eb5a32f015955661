"""The egress-share yardstick (emulator.schedule.egress) against processor sharing on one link
and against the max-min fluid network it stands in for at scale: equal where the senders' NICs
are the bottleneck, optimistic where a receiver is."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from emulator.schedule.egress import EgressShareNetwork
from emulator.schedule.fabric import star_path
from emulator.schedule.fluid import FluidNetwork

REPO = Path(__file__).resolve().parents[2]
GBPS = 400e9
C = GBPS / 8  # bytes/s


def finish_times(net: EgressShareNetwork | FluidNetwork, flows: list[tuple]) -> dict[int, float]:
    """Add (start, id, src, dst, bytes[, cap]) flows at their starts; each flow's finish time."""
    pending = sorted(flows)
    done: dict[int, float] = {}
    now = 0.0
    for _ in range(10_000):
        while pending and pending[0][0] <= now:
            _start, fid, src, dst, nbytes, *cap = pending.pop(0)
            net.add(fid, src, dst, 49152 + fid, nbytes, cap[0] if cap else None)
        t = min(net.next_completion(), pending[0][0] if pending else math.inf)
        if t == math.inf:
            return done
        now = t
        for fid in net.advance(now):
            done[fid] = now
    raise AssertionError("did not finish")


def test_an_all_to_all_through_an_ideal_switch_reads_as_max_min() -> None:
    """Every NIC sends to every other: the senders' NICs are the bottleneck, and each flow's
    finish is the same in both (n-1 flows of B at C/(n-1) each: (n-1)B/C)."""
    n, nbytes = 8, 65536
    flows = [(0.0, s * n + d, s, d, nbytes) for s in range(n) for d in range(n) if s != d]
    egress = finish_times(EgressShareNetwork(GBPS), flows)
    maxmin = finish_times(FluidNetwork(star_path(GBPS)), flows)
    assert egress.keys() == maxmin.keys()
    for fid, t in egress.items():
        assert t == pytest.approx(maxmin[fid], rel=1e-9)
        assert t == pytest.approx((n - 1) * nbytes / C, rel=1e-9)


def test_an_incast_reads_optimistic() -> None:
    """Four senders onto one receiver: max-min shares the receiver's link (each C/4, done at
    4B/C); the egress share sees no receiver (each at C, done at B/C)."""
    nbytes = 1 << 20
    flows = [(0.0, s, s, 7, nbytes) for s in range(4)]
    egress = finish_times(EgressShareNetwork(GBPS), flows)
    maxmin = finish_times(FluidNetwork(star_path(GBPS)), flows)
    for s in range(4):
        assert egress[s] == pytest.approx(nbytes / C, rel=1e-9)
        assert maxmin[s] == pytest.approx(4 * nbytes / C, rel=1e-9)


def test_processor_sharing_as_flows_come_and_go() -> None:
    """A alone at C until half its bytes are through (B/2C), then A and B at C/2 each: A's other
    half takes B/C (A ends at 1.5 B/C) while B gets half of its bytes; then B alone at C (B ends
    at 2 B/C)."""
    nbytes = 1 << 20
    done = finish_times(
        EgressShareNetwork(GBPS), [(0.0, 1, 0, 1, nbytes), (nbytes / (2 * C), 2, 0, 2, nbytes)]
    )
    assert done[1] == pytest.approx(1.5 * nbytes / C, rel=1e-9)
    assert done[2] == pytest.approx(2 * nbytes / C, rel=1e-9)


def test_rate_caps_share_as_max_min_on_one_link() -> None:
    """One flow capped at C/4 and two free ones on one NIC: the free ones split the rest
    (3C/8 each), as max-min with caps gives on a single link."""
    nbytes = 3 << 20
    flows = [
        (0.0, 1, 0, 1, nbytes, GBPS / 4),
        (0.0, 2, 0, 2, nbytes),
        (0.0, 3, 0, 3, nbytes),
    ]
    egress = finish_times(EgressShareNetwork(GBPS), flows)
    maxmin = finish_times(FluidNetwork(star_path(GBPS)), flows)
    assert egress[2] == pytest.approx(nbytes / (3 * C / 8), rel=1e-9)
    for fid in (1, 2, 3):
        assert egress[fid] == pytest.approx(maxmin[fid], rel=1e-9)


def test_a_rank_to_itself_and_empty_flows_are_instant() -> None:
    net = EgressShareNetwork(GBPS)
    net.add(1, 3, 3, 49152, 4096)
    net.add(2, 0, 1, 49152, 0)
    assert net.next_completion() == 0.0
    assert sorted(net.advance(0.0)) == [1, 2]
    assert net.next_completion() == math.inf


def _ideal_job_times(name: str) -> dict[str, float]:
    import dataclasses

    from emulator.planning.workload import plan_workload, trace_prefix
    from emulator.scenario import load_scenario

    scenario = load_scenario(REPO / "scenarios" / name)
    times = {}
    for ideal in ("max_min", "egress_share"):
        chosen = dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, ideal=ideal))
        with trace_prefix(chosen) as prefix:
            planned = plan_workload(
                chosen, prefix, chosen.fabric.ranks, chosen.fabric.rank_rate_bps
            )
        times[ideal] = planned.ideal.job_time_s
    print(name, times)
    return times


@pytest.mark.parametrize("name", ["alltoall_only.yaml", "allreduce_only.yaml"])
def test_a_shipped_scenario_plans_alike_where_the_nics_are_the_bottleneck(name: str) -> None:
    """The main job's balanced placement: every queue pair on its own uplink, every sender's
    NIC the bottleneck, and the two yardsticks give the same ideal job time."""
    times = _ideal_job_times(name)
    assert times["egress_share"] == pytest.approx(times["max_min"], rel=1e-9)


def test_ecmp_collisions_are_what_the_egress_share_does_not_see() -> None:
    """The ECMP placement: rings collide on uplinks and max-min shares them (48.3 ms); the
    egress share sees only the NICs and reads the collision-free time of the balanced
    placement (14.7 ms), 3.3x short: the optimism docs/flow-level.md warns of."""
    ecmp = _ideal_job_times("allreduce_only_ecmp.yaml")
    balanced = _ideal_job_times("allreduce_only.yaml")
    assert ecmp["egress_share"] == pytest.approx(balanced["max_min"], rel=1e-9)
    assert ecmp["egress_share"] < 0.5 * ecmp["max_min"]


def test_emulate_plan_plans_with_the_scenarios_yardstick_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from emulator.cli import main

    text = (REPO / "scenarios" / "allreduce_only_ecmp.yaml").read_text()
    assert "\nrun:\n" in text
    path = tmp_path / "ecmp_egress.yaml"
    path.write_text(text.replace("\nrun:\n", "\nrun:\n  ideal: egress_share\n", 1))
    assert main(["plan", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["fabric"].endswith("(run.ideal: egress_share)")
    balanced = _ideal_job_times("allreduce_only.yaml")["max_min"]
    assert document["ideal_job_time_s"] == pytest.approx(balanced, rel=1e-9)
