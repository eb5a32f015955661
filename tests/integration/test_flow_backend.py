"""The flow-level backend against the packet simulator, on the main job's fabric (2 leaves x 8
hosts, 2 spines, 4 x 400G parallel links) and its placement: each collective type alone, as
the shipped allreduce_only and alltoall_only scenarios run it, reads busbw and job time within
10% of the simulator's and FCT p50 within 20% (the issue's bounds; docs/flow-level.md has the
numbers), on a 3-tier Clos too; where DCQCN acts the run says it is outside what was validated;
the same results folder; what it does not model refused in one line; a workload
outside what was validated said so in the summary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from emulator.errors import ScenarioError
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario

REPO = Path(__file__).resolve().parents[2]


def shipped(name: str, iterations: int) -> Scenario:
    scenario = load_scenario(REPO / "scenarios" / name)
    workload = scenario.workload
    assert workload is not None and workload.generate is not None
    generate = dataclasses.replace(workload.generate, iterations=iterations)
    metrics = dataclasses.replace(
        scenario.metrics,
        prometheus=dataclasses.replace(scenario.metrics.prometheus, enabled=False),
    )
    return dataclasses.replace(
        scenario, workload=dataclasses.replace(workload, generate=generate), metrics=metrics
    )


def run(scenario: Scenario, backend: str, out: Path) -> dict[str, Any]:
    result = run_scenario(
        scenario, RunOptions(out_dir=out, progress=False, backend=backend, report=False)
    )
    assert not result.partial
    return result.summary


@pytest.mark.parametrize(
    ("name", "iterations"), [("allreduce_only.yaml", 1), ("alltoall_only.yaml", 3)]
)
def test_one_collective_type_reads_as_the_packet_simulator(
    name: str, iterations: int, tmp_path: Path
) -> None:
    scenario = shipped(name, iterations)
    flow = run(scenario, "flow", tmp_path / "flow")
    sim = run(scenario, "sim", tmp_path / "sim")
    print(name, "flow", flow["job_time_s"], "sim", sim["job_time_s"])
    assert flow["job_time_s"] == pytest.approx(sim["job_time_s"], rel=0.10)
    for ctype, stats in sim["collectives"].items():
        ours = flow["collectives"][ctype]
        print(ctype, {k: (ours[k], stats[k]) for k in ("busbw_mean_bytes_per_s", "fct_p50_s")})
        assert ours["busbw_mean_bytes_per_s"] == pytest.approx(
            stats["busbw_mean_bytes_per_s"], rel=0.10
        )
        assert ours["fct_p50_s"] == pytest.approx(stats["fct_p50_s"], rel=0.20)
        assert ours["flows_finished"] == stats["flows_finished"]
    assert flow["flow_level"]["outside_validated"] == []
    # the same folder: flows, collectives, ports and NICs, in simulated time
    for table in ("flows", "collectives", "ports", "nic"):
        assert pq.read_table(tmp_path / "flow" / f"{table}.parquet").num_rows > 0, table
    assert flow["fidelity"]["leaves_out"] and flow["engine"]["queue_pairs"] > 0


TWO_ON_ONE_UPLINK = """\
name: two_on_one_uplink
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 1
  parallel_links: 1
  host_link_gbps: 400
  fabric_link_gbps: 400
traffic:
  - {name: x, kind: pairs, pairs: [[0, 4], [1, 5]], bytes_per_pair: 16777216}
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 4096
metrics:
  prometheus: {enabled: false}
"""


def test_two_queue_pairs_on_one_uplink_read_as_the_packet_simulator(tmp_path: Path) -> None:
    """Two queue pairs share one 400G uplink, each sending 1 MiB messages, the next when the
    last completed: the queue each pair of messages builds (1 MB) drains while they wait for
    their completions. The first model read this 1.33x long with 13 CNPs against the
    simulator's 4 (it jumped over the waits with its queue full and its reaction points frozen,
    sent past a message's end, and counted queued bytes twice); measured now 716.4 against
    705.8 us, 3 CNPs against 4."""
    path = tmp_path / "two.yaml"
    path.write_text(TWO_ON_ONE_UPLINK)
    scenario = load_scenario(path)
    flow = run(scenario, "flow", tmp_path / "flow")
    sim = run(scenario, "sim", tmp_path / "sim")
    print("flow", flow["job_time_s"], flow["totals"], "sim", sim["job_time_s"], sim["totals"])
    assert flow["job_time_s"] == pytest.approx(sim["job_time_s"], rel=0.05)
    ours = pq.read_table(tmp_path / "flow" / "flows.parquet").column("fct_s").to_pylist()
    theirs = pq.read_table(tmp_path / "sim" / "flows.parquet").column("fct_s").to_pylist()
    assert sorted(ours)[len(ours) // 2] == pytest.approx(sorted(theirs)[len(theirs) // 2], rel=0.1)
    assert flow["totals"]["cnps"] <= 2 * max(sim["totals"]["cnps"], 1)


# A 3-tier Clos (2 pods of 2 leaves x 8 hosts, 2 spines a pod, 2 super spines, 4 x 400G
# parallel links: 1:1 at every tier), 32 ranks, expert-parallel groups of 16 split over the four
# leaves (their All-to-All crosses the super spines), data-parallel pairs across the pods; ECMP on
# hashed source ports, so some All-Reduce rings collide on an uplink and DCQCN acts there
THREE_TIERS = """\
name: three_tiers
workload:
  generate:
    kind: moe_mix
    ranks: 32
    expert_parallel_size: 16
    expert_placement: split
    dispatch_bytes: 4194304
    allreduce_bytes: 16777216
    iterations: 3
    overlap: true
    {only}
fabric:
  kind: clos
  hosts_per_leaf: 8
  leaves: 2
  spines: 2
  pods: 2
  super_spines: 2
  parallel_links: 4
  host_link_gbps: 400
  fabric_link_gbps: 400
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 4096
collectives:
  algorithms: {{ALL_REDUCE: ring, ALL_TO_ALL: parallel}}
  qps_per_peer: 2
metrics:
  prometheus: {{enabled: false}}
"""


def three_tiers(tmp_path: Path, only: str, ctype: str) -> tuple[dict[str, Any], ...]:
    """THREE_TIERS with one collective type on the flow level and the packet simulator: both
    summaries, then that type's statistics in each."""
    path = tmp_path / "three_tiers.yaml"
    path.write_text(THREE_TIERS.format(only=only))
    scenario = load_scenario(path)
    flow = run(scenario, "flow", tmp_path / "flow")
    sim = run(scenario, "sim", tmp_path / "sim")
    ours, theirs = flow["collectives"][ctype], sim["collectives"][ctype]
    print("flow", flow["job_time_s"], ours, "sim", sim["job_time_s"], theirs)
    return flow, sim, ours, theirs


def test_three_tiers_read_as_the_packet_simulator(tmp_path: Path) -> None:
    """The All-to-All alone on a 3-tier Clos, across the super spines: no queue reaches Kmin, and
    the flow level reads as the simulator (measured: busbw 1.029x, job time 0.991x, FCT p50
    0.995x, seeds 0-2 alike)."""
    flow, sim, ours, theirs = three_tiers(tmp_path, "include_allreduce: false", "ALL_TO_ALL")
    assert flow["job_time_s"] == pytest.approx(sim["job_time_s"], rel=0.10)
    assert ours["busbw_mean_bytes_per_s"] == pytest.approx(
        theirs["busbw_mean_bytes_per_s"], rel=0.10
    )
    assert ours["fct_p50_s"] == pytest.approx(theirs["fct_p50_s"], rel=0.20)
    assert ours["flows_finished"] == theirs["flows_finished"]
    assert ours["cnps"] == 0 and flow["flow_level"]["outside_validated"] == []


def test_where_dcqcn_acts_the_run_says_it_is_outside_what_was_validated(tmp_path: Path) -> None:
    """The All-Reduce alone on the same fabric: rings collide on ECMP uplinks and DCQCN acts.
    The fluid reaction points draw fewer CNPs than the simulator's (0.69-0.73x over seeds 0-2)
    and the run reads fast: job time 0.887-0.939x, busbw 1.10-1.18x, FCT p50 0.84-0.88x. It must
    say so, and stay within what it says."""
    flow, sim, ours, theirs = three_tiers(tmp_path, "include_alltoall: false", "ALL_REDUCE")
    assert 0 < ours["cnps"] < theirs["cnps"]
    (said,) = flow["flow_level"]["outside_validated"]
    assert said.startswith(f"DCQCN acted ({ours['cnps']} CNPs)")
    # what the warning quotes: busbw up to 18% high, FCT p50 up to 16% low, job 0.88-1.08x
    assert 1.0 <= ours["busbw_mean_bytes_per_s"] / theirs["busbw_mean_bytes_per_s"] <= 1.18
    assert 0.84 <= ours["fct_p50_s"] / theirs["fct_p50_s"] <= 1.0
    assert 0.88 <= flow["job_time_s"] / sim["job_time_s"] <= 1.08


@pytest.fixture(scope="module")
def mix(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(shipped("moe_mix.yaml", 1), "flow", tmp_path_factory.mktemp("mix") / "out")


def test_a_mix_is_run_and_said_to_be_outside_what_was_validated(mix: dict[str, Any]) -> None:
    acted, said = mix["flow_level"]["outside_validated"]
    assert acted.startswith("DCQCN acted (")
    assert "interleaved" in said and "ALL_REDUCE, ALL_TO_ALL" in said
    assert set(mix["collectives"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    assert mix["collectives"]["ALL_REDUCE"]["cnps"] > 0  # the collectives met: DCQCN reacted


def test_the_same_seed_gives_the_same_run(mix: dict[str, Any], tmp_path: Path) -> None:
    again = run(shipped("moe_mix.yaml", 1), "flow", tmp_path / "again")
    assert again["collectives"] == mix["collectives"]
    assert again["job_time_s"] == mix["job_time_s"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"transport": {"reliability": "selective"}}, "transport.reliability"),
        ({"transport": {"entropy": "per_packet"}}, "transport.entropy"),
        ({"fabric": {"leaf": {"load_balancing": {"mode": "spray"}}}}, "load_balancing.mode"),
    ],
)
def test_what_it_does_not_model_is_refused_in_one_line(
    change: dict[str, Any], said: str, tmp_path: Path
) -> None:
    import yaml

    doc = yaml.safe_load((REPO / "scenarios" / "allreduce_only.yaml").read_text())
    for section, values in change.items():
        merged = doc.setdefault(section, {})
        for key, value in values.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key].update(value)
            else:
                merged[key] = value
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError, match=said) as err:
        run_scenario(
            load_scenario(path),
            RunOptions(out_dir=tmp_path / "out", progress=False, backend="flow", report=False),
        )
    assert "\n" not in str(err.value) and "--backend sim" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_a_run_past_its_simulated_time_limit_ends_partial_and_says_why(tmp_path: Path) -> None:
    """The loop shared with the packet simulator (emulator.backends.simulated_time): the limit
    stops the run, its results are written, partial, with the reason."""
    scenario = shipped("allreduce_only.yaml", 1)
    scenario = dataclasses.replace(
        scenario, sim=dataclasses.replace(scenario.sim, time_limit_s=1e-4)
    )
    with pytest.raises(Exception, match="the flow-level run had not finished the plan"):
        run_scenario(
            scenario,
            RunOptions(out_dir=tmp_path / "out", progress=False, backend="flow", report=False),
        )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["partial"] is True
    assert "had not finished the plan after 0.0001 s" in summary["stopped_by"]
