"""Several jobs on one fabric (`workloads:`): each job's groups, peers, passes and start on its own
hosts, a job column in every table and a per-job summary, and the jobs study (each job alone vs
all together), through the schedule and the simulation backend."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.cli import main
from emulator.errors import InputError
from emulator.planning.workload import plan_workload, trace_prefix
from emulator.scenario import load_scenario
from emulator.schedule.fabric import star_path
from emulator.schedule.ideal import simulate
from emulator.schedule.job import JobSchedule, RankInput
from emulator.schedule.matching import GroupTable
from emulator.schedule.multijob import PlacedJob, jobs_source
from emulator.schedule.nodes import CommInfo, NodeInfo, NodeKind
from emulator.schedule.plan import CollectiveInstance
from emulator.schedule.tracesource import TraceSource
from emulator.studies.jobs import JOBS_JSON
from emulator.studies.jobs.analysis import ALL
from emulator.studies.jobs.study import JobsSettings, run_study, run_with_pipeline

TWO = """\
name: two
workloads:
  - name: dense
    generate: {{kind: allreduce, ranks: 4, size_bytes: 1048576, iterations: {dense_steps}}}
    hosts: "0-1,4-5"
    iterations: {dense_passes}
  - name: moe
    generate: {{kind: moe_mix, ranks: 4, expert_parallel_size: 4, dispatch_bytes: 262144,
               include_allreduce: false, iterations: 3}}
    hosts: [2, 3, 6, 7]
    start_us: {start_us}
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 1
  host_link_gbps: 100
  fabric_link_gbps: 100
run:
  backend: sim
sim:
  sample_interval_us: 50
metrics:
  prometheus: {{enabled: false}}
"""


def scenario_file(
    tmp_path: Path, dense_steps: int = 2, dense_passes: int = 1, start_us: float = 0
) -> Path:
    path = tmp_path / "two.yaml"
    path.write_text(
        TWO.format(dense_steps=dense_steps, dense_passes=dense_passes, start_us=start_us)
    )
    return path


# -- the schedule: groups, peers and hosts ----------------------------------------------------


def coll(index: int, node_id: int, size: int, pg: str | None) -> NodeInfo:
    comm = CommInfo("ALL_REDUCE", size, pg, None, None, None)
    return NodeInfo(index, node_id, "ar", NodeKind.COLLECTIVE, comm=comm)


def p2p(index: int, node_id: int, kind: str, peer: int) -> NodeInfo:
    src, dst = (None, peer) if kind == NodeKind.SEND else (peer, None)
    return NodeInfo(
        index, node_id, kind, kind, comm=CommInfo(kind.upper(), 4096, None, src, dst, 0)
    )


def trace(per_rank: list[list[NodeInfo]], groups: dict[str, list[int]]) -> TraceSource:
    def opener(nodes: list[NodeInfo]) -> Callable[[int], Iterator[NodeInfo]]:
        return lambda iteration: iter(nodes)  # the same node objects every pass

    n = len(per_rank)
    source = TraceSource("t", [Path(f"t.{r}.et") for r in range(n)], GroupTable(n, groups), None)
    source.ranks.extend(RankInput(opener(nodes), f"t.{r}.et") for r, nodes in enumerate(per_rank))
    return source


def test_two_jobs_with_the_same_group_names_and_peers_stay_on_their_own_hosts() -> None:
    # Both jobs use the world group, a group named "0" and a send from rank 0 to rank 1: each
    # must match only its own ranks, on the hosts it was placed on, every pass.
    def job_trace() -> TraceSource:
        per_rank = [
            [
                coll(0, 1, 1024, None),
                coll(1, 2, 2048, "0"),
                p2p(2, 3, NodeKind.SEND if r == 0 else NodeKind.RECV, 1 - r),
            ]
            for r in range(2)
        ]
        return trace(per_rank, {"0": [1, 0]})

    jobs = [
        PlacedJob("a", job_trace(), (3, 0), iterations=2),
        PlacedJob("b", job_trace(), (1, 4), iterations=1, start_s=1e-3),
    ]
    source = jobs_source(jobs, 5)
    schedule = JobSchedule(
        source.ranks, source.groups, keep_instances=True, rank_jobs=source.rank_jobs
    )
    result = simulate(schedule, star_path(100e9))
    by_job: dict[str, list[tuple[str, str, tuple[int, ...]]]] = {"a": [], "b": []}
    for inst in schedule.instances:
        by_job[inst.job].append((inst.collective, inst.group, inst.members))
    assert by_job["a"] == 2 * [
        ("ALL_REDUCE", "a", (3, 0)),
        ("ALL_REDUCE", "a/0", (0, 3)),  # the group lists rank 1 first: host 0
        ("SEND_RECV", "p2p:3->0", (3, 0)),
    ]
    assert by_job["b"] == [
        ("ALL_REDUCE", "b", (1, 4)),
        ("ALL_REDUCE", "b/0", (4, 1)),
        ("SEND_RECV", "p2p:1->4", (1, 4)),
    ]
    assert not any(f.src == 2 or f.dst == 2 for i in schedule.instances for f in i.flows)
    # job b starts 1 ms in; job a does not wait for it
    first = {
        job: min(r.first_issue_s for r in result.instances if r.group.split("/")[0] == job)
        for job in ("a", "b")
    }
    assert first["a"] == 0.0 and first["b"] == pytest.approx(1e-3)


def test_a_peer_outside_its_job_is_refused_naming_the_job() -> None:
    bad = trace([[p2p(0, 1, NodeKind.SEND, 5)], []], {})
    source = jobs_source([PlacedJob("a", bad, (0, 1))], 2)
    schedule = JobSchedule(source.ranks, source.groups, rank_jobs=source.rank_jobs)
    with pytest.raises(Exception, match=r"comm_dst=5 but job a has 2 rank\(s\)"):
        simulate(schedule, star_path(100e9))


def test_each_job_keeps_its_passes_start_and_step_numbering(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path, dense_steps=2, dense_passes=2, start_us=500))
    instances: list[CollectiveInstance] = []
    with trace_prefix(scenario) as prefix:
        planned = plan_workload(scenario, prefix, 8)
        simulate(planned.schedule(scenario, instances.append), star_path(100e9))
    assert [(p.name, p.hosts, p.iterations, p.start_s) for p in planned.placements] == [
        ("dense", (0, 1, 4, 5), 2, 0.0),
        ("moe", (2, 3, 6, 7), 1, 5e-4),
    ]
    first_moe = min(r.first_issue_s for r in planned.ideal.instances if r.group.startswith("moe"))
    assert first_moe >= 5e-4
    kinds = Counter((i.job, i.collective) for i in instances)
    assert kinds == {("dense", "ALL_REDUCE"): 4, ("moe", "ALL_TO_ALL"): 6}
    planned.numbering.restart()
    numbers = Counter((i.job, planned.numbering.number(i)) for i in instances)
    # dense: 2 passes x 2 steps; moe: 3 steps of dispatch + combine
    assert numbers == {
        **{("dense", k): 1 for k in range(4)},
        **{("moe", k): 2 for k in range(3)},
    }


# -- a whole run on the simulation backend ----------------------------------------------------


def test_a_run_keeps_every_job_apart_in_tables_and_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    assert main(["run", str(scenario_file(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    flows = pq.read_table(out / "flows.parquet").to_pylist()
    colls = pq.read_table(out / "collectives.parquet").to_pylist()
    qps = pq.read_table(out / "queue_pairs.parquet").to_pylist()
    hosts = {"dense": {0, 1, 4, 5}, "moe": {2, 3, 6, 7}}
    for row in flows:
        assert {row["src_rank"], row["dst_rank"]} <= hosts[row["job"]]
    assert Counter(r["job"] for r in colls) == {"dense": 2, "moe": 6}
    assert {(r["job"], r["collective_type"]) for r in colls} == {
        ("dense", "ALL_REDUCE"),
        ("moe", "ALL_TO_ALL"),
    }
    assert qps and all(r["src_rank"] in hosts[r["job"]] for r in qps)
    # the simulator's attribution and marks name each instance's job too
    attribution = pq.read_table(out / "attribution.parquet").to_pylist()
    assert {r["job"] for r in attribution} == {"dense", "moe"}
    job_of = {r["collective_id"]: r["job"] for r in colls}
    assert all(r["job"] == job_of[r["collective_id"]] for r in attribution)
    marks = pq.read_table(out / "marks.parquet").to_pylist()
    assert all(r["job"] == job_of[r["collective_id"]] for r in marks)
    summary = json.loads((out / "summary.json").read_text())
    ports = summary["attribution"]["ports"]
    shared = [p for p in ports if "queue_share_by_job" in p]
    assert shared, ports
    for port in shared:
        assert set(port["queue_share_by_job"]) <= {"dense", "moe"}
        assert sum(port["queue_share_by_job"].values()) == pytest.approx(1.0)
        assert port["top_interfering_job"] in port["queue_share_by_job"]
    assert summary["placement"] == [
        {"job": "dense", "hosts": [0, 1, 4, 5], "iterations": 1, "start_us": 0.0},
        {"job": "moe", "hosts": [2, 3, 6, 7], "iterations": 1, "start_us": 0.0},
    ]
    jobs = summary["jobs"]
    assert set(jobs) == {"dense", "moe"}
    assert jobs["dense"]["ranks"] == 4 and jobs["moe"]["ranks"] == 4
    dense = jobs["dense"]["collectives"]["ALL_REDUCE"]
    assert dense == summary["collectives"]["ALL_REDUCE"]  # the only All-Reduce is dense's
    assert list(jobs["moe"]["collectives"]) == ["ALL_TO_ALL"]
    assert jobs["moe"]["job_time_s"] < summary["job_time_s"] + 1e-12
    assert any(line.split()[:2] == ["job", "collective"] for line in printed.splitlines())
    assert any(line.split()[:2] == ["dense", "ALL_REDUCE"] for line in printed.splitlines())


# -- the jobs study ---------------------------------------------------------------------------


def test_the_jobs_study_runs_each_job_alone_on_its_hosts_and_all_together(tmp_path: Path) -> None:
    ran: list[tuple[str, tuple[tuple[str, tuple[int, ...] | str | None], ...], int]] = []

    def runner(scenario, out_dir, settings):  # type: ignore[no-untyped-def]
        ran.append(
            (out_dir.name, tuple((j.name, j.hosts) for j in scenario.workloads), scenario.run.seed)
        )
        return run_with_pipeline(scenario, out_dir, settings)

    study = tmp_path / "study"
    settings = JobsSettings(backend=None, tdf=None, progress=False, repeats=2)
    result = run_study(scenario_file(tmp_path, start_us=100), study, settings, runner=runner)
    assert ran == [
        ("all-seed0", (("dense", "0-1,4-5"), ("moe", (2, 3, 6, 7))), 0),
        ("dense-seed0", (("dense", (0, 1, 4, 5)),), 0),
        ("moe-seed0", (("moe", (2, 3, 6, 7)),), 0),
        ("all-seed1", (("dense", "0-1,4-5"), ("moe", (2, 3, 6, 7))), 1),
        ("dense-seed1", (("dense", (0, 1, 4, 5)),), 1),
        ("moe-seed1", (("moe", (2, 3, 6, 7)),), 1),
    ]
    alone = json.loads((study / "runs" / "moe-seed0" / "summary.json").read_text())
    assert alone["placement"] == [
        {"job": "moe", "hosts": [2, 3, 6, 7], "iterations": 1, "start_us": 100.0}
    ]
    # each run's scenario copy replays that run: the alone run's has only its job, pinned
    for folder, jobs in (("moe-seed1", ["moe"]), ("all-seed1", ["dense", "moe"])):
        copy = load_scenario(study / "runs" / folder / "scenario.yaml")
        assert [j.name for j in copy.jobs] == jobs and copy.run.seed == 1
    copy = load_scenario(study / "runs" / "moe-seed1" / "scenario.yaml")
    assert copy.name == "two-moe-alone" and copy.jobs[0].host_list == (2, 3, 6, 7)
    assert copy.jobs[0].start_us == 100 and copy.jobs[0].generate.include_allreduce is False
    document = json.loads((study / JOBS_JSON).read_text())
    rows = {(m["job"], m["collective"], m["metric"]): m for m in document["metrics"]}
    assert set(rows) == {
        *(("dense", "ALL_REDUCE", m) for m in ("busbw_mean", "busbw_cv", "fct_p50", "fct_p99")),
        *(("moe", "ALL_TO_ALL", m) for m in ("busbw_mean", "busbw_cv", "fct_p50", "fct_p99")),
        ("dense", "job", "job_time"),
        ("moe", "job", "job_time"),
    }
    for (_, _, metric), row in rows.items():
        assert row["repeats"] == {"alone": 2, "together": 2}
        assert row["effect_of_the_others"] in ("shown", "not shown", "not measurable")
        if metric != "busbw_cv":  # a CV of 0 alone gives an unbounded ratio (null in JSON)
            low, high = row["together_over_alone"]["interval"]
            assert low <= row["together_over_alone"]["value"] <= high
    busbw = rows[("dense", "ALL_REDUCE", "busbw_mean")]
    summaries = [
        json.loads((study / "runs" / f"dense-seed{k}" / "summary.json").read_text()) for k in (0, 1)
    ]
    per_run = [s["collectives"]["ALL_REDUCE"]["busbw_mean_bytes_per_s"] for s in summaries]
    # one instance per step and run, equal counts: the pooled mean is the runs' mean
    assert busbw["alone"]["value"] == pytest.approx(sum(per_run) / 2)
    assert "dense  ALL_REDUCE" in result.text and ALL not in {r.condition for r in result.runs[1:3]}


def test_the_jobs_study_refuses_a_scenario_with_one_job(tmp_path: Path) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(
        "name: one\nworkload: {generate: {kind: allreduce, ranks: 2}}\n"
        "fabric: {kind: clos, hosts_per_leaf: 2, leaves: 1, spines: 1}\nrun: {backend: sim}\n"
    )
    settings = JobsSettings(backend=None, tdf=None, progress=False)
    with pytest.raises(InputError, match="needs a scenario with 2 or more jobs"):
        run_study(one, tmp_path / "s", settings)
    assert not (tmp_path / "s").exists()


def test_plan_prints_each_job_with_its_hosts_and_ideal_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario_file(tmp_path, start_us=250)
    assert main(["plan", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jobs = {j["job"]: j for j in document["jobs"]}
    assert jobs["dense"]["hosts"] == [0, 1, 4, 5] and jobs["moe"]["start_us"] == 250.0
    assert jobs["dense"]["collectives"] == 2 and jobs["moe"]["collectives"] == 6
    # the job ends with compute after its last collective (moe_mix's post compute)
    assert 0 < max(j["ideal_end_s"] for j in jobs.values()) <= document["ideal_job_time_s"]
    assert main(["plan", str(path)]) == 0
    assert "job moe: 4 ranks on hosts 2-3,6-7, starting at 250 us" in capsys.readouterr().out


def test_the_jobs_study_refuses_a_job_named_all(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    path.write_text(path.read_text().replace("name: moe", "name: all"))
    settings = JobsSettings(backend=None, tdf=None, progress=False)
    with pytest.raises(InputError, match="a job named 'all' would share"):
        run_study(path, tmp_path / "s", settings)
    assert not (tmp_path / "s").exists()
