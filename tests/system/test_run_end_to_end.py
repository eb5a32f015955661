"""`emulate run` end to end on this machine: a shrunken moe_mix (4 hosts, 2 steps, small sizes)
on a namespace Clos with DCQCN and the eBPF marker, its time dilation calibrated automatically.

Checks what the issue asks of the results folder: every planned flow and collective has a
record, bytes match the plan, busbw is positive and below the ideal, plots exist, the exporter
answered during the run, and nothing the run created is left on the machine. Then a run stopped
with SIGINT half-way leaves a folder marked partial and a clean machine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.timescale.curve import CACHE_ENV
from tests.system.noise import Try, on_a_noisy_machine
from tests.system.runs import stop_run

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]

MINI = """\
name: mini_moe
workload:
  generate:
    kind: moe_mix
    ranks: 4
    expert_parallel_size: 2
    dispatch_bytes: 1048576
    allreduce_bytes: 4194304
    iterations: 2
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
  prometheus: {port: 0}
run:
  time_dilation: %s
"""


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _scrape_while_running(messages: list[str], scrapes: list[str], stop: threading.Event) -> None:
    """Once the run says where its exporter listens, fetch /metrics until the run ends."""
    deadline = time.monotonic() + 300
    url = None
    while not stop.is_set() and time.monotonic() < deadline:
        if url is None:
            found = [m for m in messages if "/metrics" in m]
            if found:
                url = re.search(r"http://\S+/metrics", found[0]).group(0)  # type: ignore[union-attr]
        else:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    scrapes.append(response.read().decode())
            except OSError:
                pass
        time.sleep(0.1)


def test_shrunken_moe_mix_end_to_end(
    fabric_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "mini.yaml"
    # rank 1 a straggler (compute 3x): in expert group (0, 1) and data-parallel pair (1, 3)
    path.write_text(MINI % "auto" + "compute: {stragglers: {1: 3.0}}\n")
    scenario = load_scenario(path)
    before = _netns()
    messages: list[str] = []
    scrapes: list[str] = []
    stop = threading.Event()
    scraper = threading.Thread(target=_scrape_while_running, args=(messages, scrapes, stop))
    scraper.start()
    try:
        result = run_scenario(
            scenario,
            RunOptions(
                out_dir=tmp_path / "out",
                progress=False,
                fabric_prefix=fabric_env,
                say=messages.append,
            ),
        )
    finally:
        stop.set()
        scraper.join()
    summary = result.summary
    assert not result.partial and summary["partial"] is False
    # the TDF came from a calibration of this machine, recorded in the summary and cached
    choice = summary["time_dilation"]
    assert choice["how"] == "auto" and choice["calibration"]["capacity_bps"] > 0
    assert summary["tdf"] == choice["tdf"] >= 1
    # the load curve gave the first factor for this peak (4 NICs x 400G); a probe of the workload
    # verified it or raised it
    from emulator.timescale.curve import Calibration
    from emulator.timescale.tdf import auto_tdf

    curve = Calibration.from_json(choice["calibration"])
    assert curve.points and choice["peak_load_bps"] == 4 * 400e9
    first, _why = auto_tdf(4 * 400e9, curve, scenario.transport.dcqcn, 0.95)
    assert summary["tdf"] >= first and choice["bound_by"]
    probes = [m for m in messages if "TDF" in m and ("verifying" in m or m.startswith("TDF "))]
    probes += [m for m in messages if "no probe up to TDF" in m]
    print("\n".join(probes))  # each probe's factor and, when late, why
    if not (tmp_path / "cache" / "verified_tdf.json").is_file():
        # CI once saw four probes of this small workload fail on the shared machine (the run
        # at the last factor then read ok): the product runs unverified and must say so, and
        # the run's own verdict decides (both branches of verify: tests/unit/test_tdf_probe.py)
        assert choice["bound_by"] == "unverified: probes kept failing", probes
        assert any("no probe up to TDF" in m for m in messages), probes
    assert (tmp_path / "cache" / "calibration.json").is_file()

    # every planned collective and flow has a complete record with the planned bytes
    from emulator.planning.workload import plan_workload, trace_prefix

    with trace_prefix(scenario) as prefix:
        planned = plan_workload(scenario, prefix, 4)
    out = result.out_dir
    collectives = pq.read_table(out / "collectives.parquet").to_pylist()
    flows = pq.read_table(out / "flows.parquet").to_pylist()
    assert len(collectives) == planned.collectives == 12  # per step: 2 AR + 2x2 A2A
    assert len(flows) == planned.ideal.flows_total
    assert sum(f["bytes"] for f in flows) == planned.ideal.bytes_total
    assert all(f["end_s"] is not None and f["fct_s"] > 0 for f in flows)
    assert {c["iteration"] for c in collectives} == {0, 1}
    line_bytes_per_s = 400e9 / 8
    for c in collectives:
        assert c["complete"] and c["busbw_bytes_per_s"] > 0
        # Every collective here is between two ranks, whose busbw cannot beat their NICs' line
        # rate. The ideal of one instance is not a bound on its own: the fluid model shares a
        # spine link between the two concurrent All-Reduces, and a run in which one of them
        # starts a little earlier gives it a share above half for that moment.
        assert c["group_size"] == 2
        assert c["busbw_bytes_per_s"] <= line_bytes_per_s * 1.05
    for ctype in ("ALL_REDUCE", "ALL_TO_ALL"):
        stats = summary["collectives"][ctype]
        # over all instances the shares even out: the mean stays below the ideal
        assert 0 < stats["busbw_mean_bytes_per_s"] <= stats["ideal_busbw_bytes_per_s"] * 1.05
    # the impairment is recorded with what it touched: per step 2 All-to-Alls and 1 All-Reduce
    assert summary["impairments"] == {
        "stragglers": {"1": 3.0},
        "collectives_with_a_straggler": {"ALL_TO_ALL": 4, "ALL_REDUCE": 2},
    }
    # the flows are long next to the links' shaper bursts, so that check has nothing to say
    fidelity = summary["fidelity"]
    print(
        "fidelity:",
        json.dumps(fidelity),
        "engine:",
        json.dumps(
            {k: summary["engine"].get(k) for k in ("worker_tick_lateness", "worker_busy_ratio")}
        ),
    )
    assert not any("burst tolerance" in r for r in fidelity["reasons"])
    # every check had its data; the verdict itself is judged below, away from the edge: auto
    # chose the lowest factor its probes held at, where a 4 s job's pacing deficit is a cliff
    # with run-to-run noise (0.2-12% at TDF 1300 here, 0-0.25% at 2000), so this run may read ok
    # or degraded for the engine's timing, and says which
    assert fidelity["unknown"] == []
    assert fidelity["verdict"] == ("degraded" if fidelity["reasons"] else "ok")
    assert summary["pfc_equivalent"]["known"] in (True, False)
    nic = pq.read_table(out / "nic.parquet").to_pylist()
    assert {r["rank"] for r in nic} == {0, 1, 2, 3} and sum(r["delta_bytes"] for r in nic) > 0
    assert pq.read_table(out / "ports.parquet").num_rows > 0
    for plot in ("busbw_per_iteration.png", "fct_cdf.png"):
        assert (out / "plots" / plot).stat().st_size > 10_000
    assert json.loads((out / "summary.json").read_text())["scenario"] == "mini_moe"
    # the exporter answered during the run with the run's metrics
    assert scrapes and any("emulator_run_info" in s for s in scrapes)
    # nothing left behind
    assert _netns() == before
    assert not list(tmp_path.glob("state*.json"))

    # The verdict tells a run that held from one that did not: 3x the factor auto chose is well
    # clear of the edge (ok: ticks on time for DCQCN's timers, no pacing deficit, and no drops or
    # retransmissions in the lossless fabric); an eighth of it is far below (degraded, and the
    # reasons name the engine's workers). The workers are busy ~14% of the time at 3x, so what
    # still turns that run degraded is the machine stopping them: a CI VM once held one flow's
    # last bytes ~50 ms (its p99 FCT +9.3%). That run must read ok in a majority of tries.
    def run_at(factor: float, label: str) -> dict:
        tdf = round(summary["tdf"] * factor)
        path.write_text(MINI % tdf + "compute: {stragglers: {1: 3.0}}\n")
        held = run_scenario(
            load_scenario(path),
            RunOptions(out_dir=tmp_path / f"out-{label}", progress=False, fabric_prefix=fabric_env),
        ).summary
        print(f"TDF {tdf}:", json.dumps(held["fidelity"]), json.dumps(held["totals"]))
        return held

    def clear_of_the_edge(attempt: Try) -> None:
        held = run_at(3.0, f"3x-{attempt.index}")
        attempt.note(
            tdf=held["tdf"],
            verdict=held["fidelity"]["verdict"],
            reasons=held["fidelity"]["reasons"],
            drops=held["totals"]["switch_drops"],
            resent=held["totals"]["retransmitted_packets"],
        )
        assert held["fidelity"] == {"verdict": "ok", "reasons": [], "unknown": []}
        assert held["totals"]["switch_drops"] == 0
        assert held["totals"]["retransmitted_packets"] == 0

    on_a_noisy_machine(clear_of_the_edge, what="3x the auto factor reads ok")
    late = run_at(1 / 8, "eighth")["fidelity"]
    assert late["verdict"] == "degraded" and late["unknown"] == []
    assert any(r.startswith("engine worker") for r in late["reasons"]), late["reasons"]
    assert _netns() == before


def test_interrupted_run_writes_partial_results_and_cleans_up(
    fabric_env: str, tmp_path: Path
) -> None:
    path = tmp_path / "mini.yaml"
    # big enough to be interrupted mid-replay: 64 MiB All-Reduces at a high TDF
    path.write_text((MINI % "20000").replace("4194304", "67108864"))
    before = _netns()
    env = {**os.environ, "CHAKRA_EMULATOR_STATE_DIR": str(tmp_path)}
    out = tmp_path / "out"
    cmd = [
        str(Path(sys.executable).parent / "emulate"),
        "run",
        str(path),
        "--out",
        str(out),
        "--no-progress",
        "--netns-prefix",
        fabric_env,
    ]
    proc = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # wait until the replay runs
            seen.append(line)
            if "/metrics" in line or time.monotonic() > deadline:
                break
        time.sleep(3.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        stop_run(proc, tmp_path)
    assert proc.returncode == 130, "".join(seen) + stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True and summary["stopped_by"] == "interrupt"
    assert "results:" in stdout
    assert _netns() == before
