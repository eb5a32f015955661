"""Several jobs on the emulated fabric: two 2-rank jobs on a namespace Clos, one starting later
and one host left idle, deliver every planned byte between their own hosts, and the results keep
them apart (job column in the tables, per-job summary, a switch counter class per job);
nothing is left on the machine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.planning.workload import plan_workload, trace_prefix
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario

pytestmark = pytest.mark.system

TWO_JOBS = """\
name: two_jobs
workloads:
  - name: ar
    generate: {kind: allreduce, ranks: 2, size_bytes: 1048576, iterations: 2}
    hosts: [0, 3]
  - name: a2a
    generate: {kind: alltoall, ranks: 2, size_bytes: 524288, iterations: 2}
    hosts: [2, 4]
    start_us: 200
fabric:
  kind: clos
  hosts_per_leaf: 3
  leaves: 2
  spines: 1
  host_link_gbps: 100
  fabric_link_gbps: 100
  marker: ebpf
transport: {congestion_control: dcqcn, path_mtu_bytes: 4096}
metrics: {sample_interval_s: 0.05, prometheus: {port: 0}}
run: {time_dilation: 200}
"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_two_jobs_run_on_their_own_hosts_and_stay_apart(fabric_env: str, tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(TWO_JOBS)
    scenario = load_scenario(path)
    before = _netns()
    result = run_scenario(
        scenario, RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env)
    )
    assert not result.partial
    with trace_prefix(scenario) as prefix:
        planned = plan_workload(scenario, prefix, 6)
    flows = pq.read_table(result.out_dir / "flows.parquet").to_pylist()
    colls = pq.read_table(result.out_dir / "collectives.parquet").to_pylist()
    qps = pq.read_table(result.out_dir / "queue_pairs.parquet").to_pylist()
    hosts = {"ar": {0, 3}, "a2a": {2, 4}}
    assert len(flows) == planned.ideal.flows_total
    assert sum(f["bytes"] for f in flows) == planned.ideal.bytes_total
    assert all(f["end_s"] is not None for f in flows)
    for flow in flows:
        assert {flow["src_rank"], flow["dst_rank"]} <= hosts[flow["job"]]
    assert {(c["job"], c["collective_type"]) for c in colls} == {
        ("ar", "ALL_REDUCE"),
        ("a2a", "ALL_TO_ALL"),
    }
    assert all(c["complete"] for c in colls)
    assert qps and all(q["src_rank"] in hosts[q["job"]] for q in qps)
    # the later job's first flow starts after its offset (target time; flows' start_s share
    # the run's origin)
    first = {job: min(f["start_s"] for f in flows if f["job"] == job) for job in hosts}
    assert first["a2a"] - first["ar"] >= 200e-6 * 0.9
    # the switches count each job apart: a class per (job, collective type)
    classes = result.summary["attribution_classes"]
    assert classes["key"] == "job/collective type"
    assert set(classes["classes"].values()) == {"UNTAGGED", "a2a/ALL_TO_ALL", "ar/ALL_REDUCE"}
    rows = pq.read_table(result.out_dir / "attribution.parquet").to_pylist()
    assert {(r["job"], r["collective_type"]) for r in rows if r["job"]} == {
        ("ar", "ALL_REDUCE"),
        ("a2a", "ALL_TO_ALL"),
    }
    assert result.summary["attribution"]["marks_reconciled"]["holds"]
    jobs = result.summary["jobs"]
    assert set(jobs) == {"ar", "a2a"} and jobs["ar"]["ranks"] == 2
    assert jobs["ar"]["collectives"]["ALL_REDUCE"]["instances_complete"] == 2
    assert _netns() == before
