"""`emulate study load-balancing` for real, in simulation: a cross-leaf All-Reduce under ECMP
with go-back-N and sprayed with selective repeat, two repeats each.

8 ranks, 2 leaves of 4, 2 spines with 2 parallel links (each leaf 4 uplinks, each spine 2
links down to a leaf: both tiers balance), data-parallel pairs across the leaves (expert groups
of 4 under one leaf, no All-to-All), 2 MiB of gradients per rank. No root: the simulation
backend. About 15 s of CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import main

SCENARIO = """\
name: lb_small
workload:
  generate:
    kind: moe_mix
    ranks: 8
    expert_parallel_size: 4
    allreduce_bytes: 2097152        # 2 MiB per rank: ring steps of 256 KiB across the spines
    attention_compute_us: 10
    expert_compute_us: 10
    post_compute_us: 10
    iterations: 2
    overlap: false
    include_alltoall: false
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  parallel_links: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
  link_delay_us: 1.0
  switch_latency_ns: 600
collectives:
  algorithms: {ALL_REDUCE: ring, ALL_TO_ALL: parallel}
run: {backend: sim, seed: 3}
metrics:
  prometheus: {enabled: false}
"""
CONDITIONS = ("ecmp-gbn", "spray-sel")
REPEATS = 2


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("load_balancing")
    path = tmp / "small.yaml"
    path.write_text(SCENARIO)
    out = tmp / "study"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("os.geteuid", lambda: 1000)  # a simulation needs no root
        argv = ["study", "load-balancing", str(path), "--conditions", ",".join(CONDITIONS)]
        argv += ["--repeats", str(REPEATS), "--out", str(out), "--no-progress"]
        assert main(argv) == 0
    return out, json.loads((out / "study.json").read_text())


def test_the_study_folder_holds_every_run_and_the_study(
    study: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = study
    for condition in CONDITIONS:
        for seed in range(3, 3 + REPEATS):
            run = out / "runs" / f"{condition}-seed{seed}"
            assert (run / "summary.json").is_file() and (run / "scenario.yaml").is_file()
    for name in ("study.json", "study.txt", "report.html"):
        assert (out / name).stat().st_size > 0
    plots = {p.name for p in (out / "plots").iterdir()}
    assert plots == {"lb_busbw.png", "lb_mmr.png", "lb_fct_cdf.png"}
    text = (out / "study.txt").read_text()
    assert all(c in text for c in CONDITIONS) and "spray_gbn_collapses" not in text
    assert "load-balancing" in (out / "report.html").read_text()


def test_each_flow_carries_its_reordered_packets(study: tuple[Path, dict[str, Any]]) -> None:
    """flows.parquet's reordered_packets add up to the run's (summary.json reordering, from
    the receive queue pairs): some under spraying, none with every QP on one path."""
    import pyarrow.parquet as pq

    out, _ = study
    for condition in CONDITIONS:
        run = out / "runs" / f"{condition}-seed3"
        per_flow = pq.read_table(run / "flows.parquet").column("reordered_packets").to_pylist()
        total = json.loads((run / "summary.json").read_text())["reordering"]["reordered_packets"]
        assert None not in per_flow and sum(per_flow) == total
        assert (total > 0) == (condition == "spray-sel"), (condition, total)


def test_every_condition_has_its_numbers_with_intervals(
    study: tuple[Path, dict[str, Any]],
) -> None:
    _, document = study
    assert list(document["conditions"]) == list(CONDITIONS)
    assert document["balancing_tiers"] == ["leaf", "spine"]
    for name, condition in document["conditions"].items():
        assert len(condition["runs"]) == REPEATS
        assert [r["seed"] for r in condition["runs"]] == [3, 4]
        busbw = condition["metrics"]["busbw_mean_GBps"]["ALL_REDUCE"]
        assert busbw["value"] > 0 and busbw["repeats"] == REPEATS
        assert busbw["interval"][0] <= busbw["value"] <= busbw["interval"][1]
        for metric in ("fct_p99_us", "job_time_ms", "reordered_share", "retransmitted_packets"):
            cells = condition["metrics"][metric]
            assert all(isinstance(c["value"], float) for c in cells.values()), (name, metric)
    spray = document["conditions"]["spray-sel"]
    assert spray["load_balancing"] == "spray" and spray["reliability"] == "selective"
    # spraying reorders, and selective repeat holds what arrives early
    assert spray["metrics"]["reordered_share"]["run"]["value"] > 0
    assert all(r["counters"]["held_out_of_order"] > 0 for r in spray["runs"])
    baseline = document["conditions"]["ecmp-gbn"]["metrics"]
    assert baseline["reordered_share"]["run"]["value"] == 0
    if document["load_balance_measured"]:  # summary.json's load_balance, when the run has it
        assert spray["metrics"]["mmr"]["leaf_up"]["value"] < baseline["mmr"]["leaf_up"]["value"]


def test_the_checks_of_the_conditions_that_ran_are_judged(
    study: tuple[Path, dict[str, Any]],
) -> None:
    _, document = study
    names = [c["name"] for c in document["checks"]]
    assert names == [
        "spray_sel_removes_ecmp_imbalance",
        "selective_resends_little:spray-sel",
        "spray_sel_vs_hash_ecmp",
    ]
    verdicts = {c["name"]: c["verdict"] for c in document["checks"]}
    assert set(verdicts.values()) <= {"shown", "not shown", "not measurable"}
    # hashed ports (the scenario's default sport_policy): the question can be asked
    assert document["sport_policy"] == "hash"
    assert verdicts["spray_sel_vs_hash_ecmp"] != "not measurable"
