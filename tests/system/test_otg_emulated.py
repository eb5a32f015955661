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
    add_pfc_storm,
    api_for,
    fairness_failures,
    per_qp,
    qp_fairness_config,
    run_qp_fairness,
    serve,
    start_stop,
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


def test_pfc_and_ecn_script_on_the_emulated_fabric(fabric_env: str, tmp_path: Path) -> None:
    """A PFC storm from the receiving port beside DCQCN traffic, as sonic-mgmt's PFC tests
    build it: the rank sends its pause frames (counted in the pause flow's metrics; the Linux
    fabric does not pause for them, docs/switch-tests.md), the switches mark, the QPs back off."""
    env = {"CHAKRA_EMULATOR_STATE_DIR": os.environ["CHAKRA_EMULATOR_STATE_DIR"]}
    with serve(
        BASE,
        "--backend",
        "netns",
        "--tdf",
        TDF,
        "--duration-us",
        "3000",
        "--netns-prefix",
        fabric_env,
        tmp_path=tmp_path,
        env=env,
    ) as server:
        api = api_for(server.url)
        config = qp_fairness_config(api)
        add_pfc_storm(config, priorities=(3,))
        api.set_config(config)
        start_stop(api, "traffic", "start")
        request = api.metrics_request()
        request.flow.flow_names = ["PFC storm"]
        (storm,) = api.get_metrics(request).flow_metrics
        assert storm.port_tx == "Port 0" and storm.transmit == "started"
        rows = per_qp(api)
        # two frames per pause time (0xffff quanta at 100 Gb/s: 335.5 us) while the run lasts
        pps = int(2 / (65535 * 512 / 100e9))
        run_s = max(float(r.last_timestamp) for r in rows)
        expected = pps * run_s
        assert 0.5 * expected <= storm.frames_tx <= 1.5 * expected + 1, (storm.frames_tx, expected)
        assert all(r.ecn_ce_rx > 0 and r.cnp_rx > 0 and r.message_fail == 0 for r in rows)
        start_stop(api, "traffic", "stop")
        (storm,) = api.get_metrics(request).flow_metrics
        assert storm.transmit == "stopped" and storm.frames_tx_rate == 0
    assert not namespaces(fabric_env)
