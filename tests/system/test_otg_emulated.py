"""`emulate otg serve` on the emulated fabric (real packets through the namespaces' Clos and its
eBPF ECN marker), driven by the same snappi script as on the simulator: the sonic-mgmt
QP-fairness checks hold, the per-QP counters agree with the port counters, and the server and
its runs leave no namespace, state or folder behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.otg_scripts import (
    ROOT,
    api_for,
    fairness_failures,
    qp_fairness_config,
    run_qp_fairness,
    serve,
)

pytestmark = pytest.mark.system

BASE = ROOT / "scenarios" / "otg" / "clos_sim.yaml"
# 100 Gb/s ports at 1000: two senders offer 0.2 Gb/s of wall time, well inside what the engine
# keeps pace with here (docs/time-dilation.md)
TDF = "1000"


def namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(prefix)]


def test_qp_fairness_script_passes_on_the_emulated_fabric(fabric_env: str, tmp_path: Path) -> None:
    env = {"CHAKRA_EMULATOR_STATE_DIR": os.environ["CHAKRA_EMULATOR_STATE_DIR"]}
    work = tmp_path / "work"
    with serve(
        BASE,
        "--backend",
        "netns",
        "--tdf",
        TDF,
        "--duration-us",
        "2000",
        "--netns-prefix",
        fabric_env,
        "--work-dir",
        str(work),
        tmp_path=tmp_path,
        env=env,
    ) as server:
        api = api_for(server.url)
        run = run_qp_fairness(api, qp_fairness_config(api))
        failures = fairness_failures(run)
        assert not failures, failures
        for r in run.running:
            assert 15_000 < r.data_tx_rate < 30_000, (r.flow_name, r.data_tx_rate)
        request = api.metrics_request()
        request.port.port_names = ["Port 0"]
        (port,) = api.get_metrics(request).port_metrics
        assert port.frames_rx == sum(r.data_frames_rx for r in run.rows)
        assert port.bytes_rx >= sum(r.rx_bytes for r in run.rows)
        assert not namespaces(fabric_env)  # each run releases its fabric when it ends
    # the run was the engine's on real packets, and its verdict held
    summary = json.loads((work / "runs" / "001" / "results" / "summary.json").read_text())
    assert summary["backend"] == "netns" and summary["fidelity"]["verdict"] == "ok"
    assert not namespaces(fabric_env)
