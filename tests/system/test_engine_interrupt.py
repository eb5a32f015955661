"""Stopping: Ctrl-C stops every worker within a second; a worker that dies fails the run clearly.

The run is `python -m emulator.engine PLAN.json` in its own session, so Ctrl-C is simulated the
way a terminal delivers it: SIGINT to the whole process group. Worker PIDs come from the run's
"started" line and are checked one by one (only processes this test started).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator.engine.testbed import PairInfo
from emulator.errors import EXIT_EXPECTATION_FAILED, EXIT_INTERRUPTED

pytestmark = pytest.mark.system
REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _start(p: PairInfo, tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    plan = {
        "ranks": [
            {"rank": 0, "address": p.sender_addr, "netns": p.sender_ns, "line_rate_bps": 50e6},
            {"rank": 1, "address": p.receiver_addr, "netns": p.receiver_ns, "line_rate_bps": 50e6},
        ],
        # both directions so each worker is busy sending and receiving: ~10 s at 50 Mb/s
        "flows": [
            {"id": 1, "src": 0, "dst": 1, "qp": 0, "udp_sport": 50200, "bytes": 60_000_000},
            {"id": 2, "src": 1, "dst": 0, "qp": 0, "udp_sport": 50201, "bytes": 60_000_000},
        ],
        "engine": {"workers": 2},
        "transport": {"congestion_control": "none"},
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    proc = subprocess.Popen(
        [sys.executable, "-m", "emulator.engine", str(path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    started = json.loads(line)["started"]
    assert len(started) == 2 and all(_alive(pid) for pid in started)
    return proc, started


def _wait_gone(proc: subprocess.Popen[str], pids: list[int], limit_s: float) -> float:
    """Seconds until the run exited and every worker PID is gone (bounded by limit_s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if proc.poll() is not None and not any(_alive(pid) for pid in pids):
            return time.monotonic() - t0
        time.sleep(0.01)
    return float("inf")


def test_ctrl_c_stops_all_workers_within_a_second(veth_pair: PairInfo, tmp_path: Path) -> None:
    proc, workers = _start(veth_pair, tmp_path)
    try:
        time.sleep(0.5)  # let traffic flow
        assert proc.poll() is None, "the run ended before Ctrl-C"
        os.killpg(proc.pid, signal.SIGINT)
        elapsed = _wait_gone(proc, workers, limit_s=5.0)
        assert elapsed < 1.0, f"still running {elapsed:.2f} s after Ctrl-C"
        assert proc.returncode == EXIT_INTERRUPTED
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=5)


def test_a_killed_worker_fails_the_run_with_a_clear_message(
    veth_pair: PairInfo, tmp_path: Path
) -> None:
    proc, workers = _start(veth_pair, tmp_path)
    try:
        time.sleep(0.3)
        os.kill(workers[1], signal.SIGKILL)
        elapsed = _wait_gone(proc, workers, limit_s=5.0)
        assert elapsed < 2.0
        _, err = proc.communicate(timeout=5)
        assert proc.returncode == EXIT_EXPECTATION_FAILED
        assert f"engine worker 1 (pid {workers[1]}" in err and "exited unexpectedly" in err
        assert err.count("\n") == 1, err  # one line, no traceback
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.communicate(timeout=5)


def test_a_missing_namespace_fails_the_run_naming_it(system: None) -> None:
    from emulator.engine.coordinator import EngineFailure, run_plan
    from emulator.engine.plan import EngineFlow, RankEndpoint

    ranks = [
        RankEndpoint(0, "10.99.0.1", "no-such-netns-engine-test"),
        RankEndpoint(1, "10.99.0.2", "no-such-netns-engine-test"),
    ]
    with pytest.raises(EngineFailure, match="network namespace no-such-netns-engine-test"):
        run_plan(ranks, [EngineFlow(1, 0, 1, 0, 50000, 1000)])
