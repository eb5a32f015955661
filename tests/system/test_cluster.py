"""A run over a Ray cluster on this machine: two Ray nodes stand for two servers (each offers its
server's custom resource), two "underlay" namespaces joined by a veth stand for their NICs, and
each server's actor has its own state file and namespace prefix. Ray's token authentication is
on, as it must be for the cluster's non-loopback address. The cluster is shared by the module's
tests (starting one costs seconds).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.backends.cluster.local import LocalCluster, local_cluster
from emulator.engine.coordinator import EngineFailure
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from tests.system.noise import Try, on_a_noisy_machine

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
TDF = 8000
# The same workload on one machine and split over two servers at the same TDF: each collective
# type's median busbw within this share of the other's (the run-to-run spread of this mini job
# at this TDF is a few percent; the bridge adds a few ms of wall time per cross-server
# dependency, a few hundred ns of target time here).
BUSBW_BOUND = 0.15

SCENARIO = """\
name: {name}
workload:
  generate:
    kind: moe_mix
    ranks: 4
    expert_parallel_size: 2
    dispatch_bytes: 1048576
    allreduce_bytes: 4194304
    iterations: {iterations}
    overlap: true
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 2
  spines: 2
  host_link_gbps: 400
  fabric_link_gbps: 400
  marker: ebpf
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 4096
metrics:
  sample_interval_s: 0.05
  prometheus: {{port: 0}}
run:
  time_dilation: {tdf}
  deadline_s: 300
"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces)")
    with local_cluster(tmp_path_factory.mktemp("cluster-state")) as cluster:
        yield cluster


def _scenario(
    lab: LocalCluster, tmp: Path, *, split: bool, iterations: int = 2, tdf: int = TDF
) -> Path:
    text = SCENARIO.format(name="split" if split else "whole", iterations=iterations, tdf=tdf)
    if split:
        text += lab.cluster_yaml({"a": "[0]", "b": "[1]"})
    path = tmp / ("split.yaml" if split else "whole.yaml")
    path.write_text(text)
    return path


def _flows(out: Path) -> Counter[tuple[int, int, int, str]]:
    t = pq.read_table(out / "flows.parquet").to_pylist()
    return Counter((r["src_rank"], r["dst_rank"], r["bytes"], r["collective_type"]) for r in t)


def _busbw(out: Path) -> dict[str, float]:
    rows = pq.read_table(out / "collectives.parquet").to_pylist()
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["collective_type"], []).append(r["busbw_bytes_per_s"])
    return {k: statistics.median(v) for k, v in by.items()}


def _prefixed(prefix: str) -> set[str]:
    return {ns for ns in _netns() if ns.startswith(prefix)}


def test_split_by_leaf_gives_the_one_machine_run(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    def compare(tr: Try) -> None:
        out = tmp_path / f"try{tr.index}"
        whole = run_scenario(
            load_scenario(_scenario(lab, tmp_path, split=False)),
            RunOptions(out_dir=out / "whole", progress=False, fabric_prefix=fabric_env),
        )
        messages: list[str] = []
        split = run_scenario(
            load_scenario(_scenario(lab, tmp_path, split=True)),
            RunOptions(
                out_dir=out / "split",
                progress=False,
                fabric_prefix=fabric_env,
                cluster=lab.address,
                say=messages.append,
            ),
        )
        one, two = _busbw(out / "whole"), _busbw(out / "split")
        deps = split.summary["engine"]["dependency_latency"]
        tr.note(
            **{f"busbw_{k}": two[k] / one[k] for k in one},
            whole=whole.summary["fidelity"]["verdict"],
            split=split.summary["fidelity"]["verdict"],
            cross_p50_ms=deps.get("cross_server", {}).get("wall_p50_ms"),
            same_p50_ms=deps.get("same_server", {}).get("wall_p50_ms"),
        )
        # every byte delivered, the same flows and collectives
        assert (
            not split.partial
            and split.summary["flows"]["finished"] == split.summary["flows"]["planned"]
        )
        assert _flows(out / "split") == _flows(out / "whole")
        assert set(one) == set(two) == {"ALL_REDUCE", "ALL_TO_ALL"}
        for result in (whole, split):
            totals = result.summary["queue_pair_totals"]
            flows_bytes = sum(
                b for (_, _, b, _), n in _flows(out / "whole").items() for _ in range(n)
            )
            assert totals["data_bytes_received"] == totals["data_bytes_acked"] == flows_bytes
        # placed as asked, both servers' CPU sampled, dependencies measured across servers
        servers = split.summary["engine"]["servers"]
        assert servers["a"]["ranks"] == [0, 1] and servers["b"]["ranks"] == [2, 3]
        assert set(split.summary["machine"]["servers"]) == {"a", "b", "driver"}
        # the verdict has a part per server, each judged on what it held
        parts = split.summary["fidelity"]["parts"]
        assert set(parts) == {"server a", "server b"}, parts
        assert deps["cross_server"]["count"] > 0
        assert any("2 links between servers as VXLAN" in m for m in messages), messages
        # each server's underlay took VXLAN only from the other: its guard, read at the end
        for name in ("a", "b"):
            part = split.summary["fabric_backend"]["servers"][name]["part"]
            (guard,) = part["underlay_guards"]
            assert guard["tunnels"] == 2 and guard["dropped_frames"] == 0, guard
        for kind in one:
            assert abs(two[kind] / one[kind] - 1) <= BUSBW_BOUND, (kind, one, two)

    on_a_noisy_machine(compare, what="split vs whole")
    assert not _prefixed(f"{fabric_env}a-") and not _prefixed(f"{fabric_env}b-")
    assert not (lab.state_dir / "a" / "state.json").exists()
    assert not (lab.state_dir / "b" / "state.json").exists()


def test_a_killed_actor_stops_the_run_with_partial_results_and_nothing_left(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    path = _scenario(lab, tmp_path, split=True, iterations=40, tdf=20000)
    out = tmp_path / "out"
    state = lab.state_dir / "b" / "state.json"
    killed: list[float] = []
    gave_up = threading.Event()

    def kill_server_b() -> None:
        # server b's part is up once its state file and namespaces exist; the workers start
        # and the replay is under way a few seconds later (it runs for minutes at this TDF)
        deadline = time.monotonic() + 120
        while not (state.exists() and _prefixed(f"{fabric_env}b-")):
            if time.monotonic() > deadline or gave_up.wait(0.2):
                return
        if gave_up.wait(8.0):
            return
        actor_pid = json.loads(state.read_text())["pid"]
        killed.append(time.monotonic())
        os.kill(actor_pid, signal.SIGKILL)  # the actor of server b, as `kill -9` would

    # the run stays on this (the main) thread: it installs its signal handlers
    killer = threading.Thread(target=kill_server_b, daemon=True)
    killer.start()
    try:
        with pytest.raises(EngineFailure) as failure:
            run_scenario(
                load_scenario(path),
                RunOptions(
                    out_dir=out, progress=False, fabric_prefix=fabric_env, cluster=lab.address
                ),
            )
    finally:
        gave_up.set()
        killer.join(timeout=10)
    assert killed, "server b's part never came up"
    stopped_s = time.monotonic() - killed[0]
    assert "server b" in str(failure.value), failure.value
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True
    print(f"stopped {stopped_s:.1f} s after the kill: {failure.value}")
    # nothing left on either server: server b's by the clean-up task on its node
    assert not _prefixed(f"{fabric_env}a-") and not _prefixed(f"{fabric_env}b-")
    assert not (lab.state_dir / "a" / "state.json").exists()
    assert not state.exists()
    for ns, _ in lab.underlays.values():
        links = subprocess.run(
            ["ip", "-n", ns, "-o", "link", "show", "type", "vxlan"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert links.strip() == "", links


def test_no_token_on_a_non_loopback_address_is_refused_before_anything_starts(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    path = _scenario(lab, tmp_path, split=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token either
    before = _netns()
    proc = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "run", str(path), "--cluster", lab.address,
         "--out", str(tmp_path / "out"), "--netns-prefix", fabric_env, "--no-progress"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "token authentication" in lines[0], proc.stderr
    assert "RAY_AUTH_MODE=token" in lines[0]
    assert _netns() == before
    assert not (tmp_path / "out").exists()


def test_the_software_dut_with_its_ports_split_over_two_servers(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    """The incast switch test (scenarios/switch_tests/incast_dcqcn.yaml, as adapted to the
    software DUT by tests/system/test_switch_tests.py) with ranks 0-1 on one server and 2-3 on
    the other: every expectation as on one machine."""
    from emulator.scenario.cluster import ClusterSpec, ServerSpec
    from fabrics.iproute import ip, run
    from tests.system.software_dut import PORTS, software_dut
    from tests.system.test_switch_tests import CASES, DUT_CASES, on_the_software_dut

    with software_dut(fabric_env) as (_, cables):
        shipped = on_the_software_dut(load_scenario(CASES / "incast_dcqcn.yaml"), cables)
        half = PORTS // 2
        cluster = ClusterSpec(
            workers_per_server=1,
            servers=(
                ServerSpec(
                    name="a", interfaces=tuple(cables[:half]), state_dir=str(lab.state_dir / "a")
                ),
                ServerSpec(
                    name="b", interfaces=tuple(cables[half:]), state_dir=str(lab.state_dir / "b")
                ),
            ),
        )
        scenario = dataclasses.replace(
            shipped, run=dataclasses.replace(shipped.run, cluster=cluster)
        )
        result = run_scenario(
            scenario,
            RunOptions(
                out_dir=tmp_path / "out",
                progress=False,
                fabric_prefix=fabric_env,
                cluster=lab.address,
                say=print,
            ),
        )
        verdicts = result.summary["expectations"]
        assert [v["status"] for v in verdicts] == DUT_CASES["incast_dcqcn"], json.dumps(
            verdicts, indent=1
        )
        assert not result.partial and result.failed_expectations == 0
        summary = result.summary
        assert summary["backend"] == "cluster"
        assert set(summary["fidelity"]["parts"]) == {"server a", "server b"}
        servers = summary["engine"]["servers"]
        assert servers["a"]["ranks"] == list(range(half))
        assert servers["b"]["ranks"] == list(range(half, PORTS))
        qps = pq.read_table(result.out_dir / "queue_pairs.parquet").to_pylist()
        assert sum(q["data_bytes_received"] for q in qps) == sum(
            (2 << 20) * len(p.flow_pairs()) for p in scenario.traffic
        )
        nic = pq.read_table(result.out_dir / "nic.parquet").to_pylist()
        assert {r["rank"] for r in nic} == set(range(PORTS))
        # every server gave its interfaces back to the root namespace
        for name in cables:
            assert run(ip("-o", "link", "show", "dev", name)).strip()
    assert not (lab.state_dir / "a" / "state.json").exists()
    assert not (lab.state_dir / "b" / "state.json").exists()


def test_auto_tdf_is_calibrated_on_each_server_then_verified_over_the_cluster(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    """Each server measures its own share's load curve, the highest factor is the first guess,
    and short replays of the scenario over the whole cluster verify it (as on one machine): here
    the two "servers" share two cores, which only the replays over the cluster can see."""
    path = tmp_path / "auto.yaml"
    path.write_text(
        # one step: what is checked is the calibration and the verification, not the replay
        _scenario(lab, tmp_path, split=True, iterations=1)
        .read_text()
        .replace(f"time_dilation: {TDF}", "time_dilation: auto")
    )
    messages: list[str] = []
    result = run_scenario(
        load_scenario(path),
        RunOptions(
            out_dir=tmp_path / "out",
            progress=False,
            fabric_prefix=fabric_env,
            cluster=lab.address,
            say=messages.append,
            recalibrate=True,  # measure, whatever an earlier run cached
        ),
    )
    choice = result.summary["time_dilation"]
    per_server = choice["per_server"]
    print(json.dumps({k: (v["tdf"], v["bound_by"], v["shape"]) for k, v in per_server.items()}))
    print(choice["bound_by"], "->", choice["tdf"], result.summary["fidelity"]["verdict"])
    assert choice["how"] == "auto per server" and set(per_server) == {"a", "b"}
    # each server measured its own share (a: a leaf and both spines; b: a leaf)
    assert "2 ranks on 1x2 hosts, 2 spines" in per_server["a"]["shape"]
    assert "2 ranks on 1x2 hosts, 1 spines" in per_server["b"]["shape"]
    assert all(v["calibration"]["points"] for v in per_server.values())
    assert any("the highest of the servers'" in m for m in messages), messages
    # then probes of the scenario over the cluster, from the highest of the curves' factors up
    assert any(m.startswith("verifying TDF") for m in messages), messages
    assert "probe" in choice["bound_by"]
    assert result.summary["tdf"] == choice["tdf"] >= max(v["tdf"] for v in per_server.values())
    assert not result.partial


def test_emulate_clean_restores_a_server_after_a_sigkill_of_its_actor(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    """With the driver gone too (nobody left to run the clean-up task), `emulate clean` on the
    server, pointed at its state folder, releases what its actor made."""
    import ray

    from emulator.backends.cluster.connect import place, release
    from emulator.backends.cluster.placement import plan_cluster
    from emulator.raycluster.join import connect
    from emulator.raycluster.sources import source_fingerprint

    scenario = load_scenario(_scenario(lab, tmp_path, split=True))
    cluster = dataclasses.replace(scenario.run.cluster, address=lab.address)
    plan = plan_cluster(cluster, scenario.fabric, fabric_env)
    connect(lab.address)
    placed = place(cluster, source_fingerprint())
    try:
        b = plan.share("b")
        ray.get(
            placed.actors["b"].bring_up.remote(scenario.fabric, TDF, b.prefix, b.part, b.ports),
            timeout=120,
        )
        state = lab.state_dir / "b" / "state.json"
        assert state.exists() and _prefixed(b.prefix)
        os.kill(json.loads(state.read_text())["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # until the kernel has reaped it
            try:
                os.kill(json.loads(state.read_text())["pid"], 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        proc = subprocess.run(
            [sys.executable, "-m", "emulator.cli", "clean", "--state-dir", str(state.parent)],
            capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "removed" in proc.stdout
        assert not _prefixed(b.prefix) and not state.exists()
        ns, _ = lab.underlays["b"]
        links = subprocess.run(
            ["ip", "-n", ns, "-o", "link", "show", "type", "vxlan"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert links.strip() == "", links
    finally:
        release(placed.actors, placed.group)
        ray.shutdown()
