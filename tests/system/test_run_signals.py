"""SIGINT and SIGTERM at random moments of `emulate run` (bring-up, replay, teardown), again and
again: the process exits within seconds, what was recorded is flushed and marked partial, and the
machine is left with nothing the run created. After SIGKILL, `emulate clean` restores it.

Each try runs the shrunken moe_mix of test_run_end_to_end at a fixed TDF (no calibration) in a
private state folder and namespace prefix, and signals it at a seeded random offset after a phase
began, told by the run's own output: start-up (before any line), fabric bring-up, replay, and
results writing plus teardown.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.system.runs import stop_run
from tests.system.test_run_end_to_end import MINI, REPO, _netns

pytestmark = pytest.mark.system
EXIT_WITHIN_S = 15.0
# phase -> (line that starts it, or None for the process start; offsets after it, in s)
PHASES: dict[str, tuple[str | None, tuple[float, float]]] = {
    "start-up": (None, (0.05, 0.8)),
    "bring-up": ("bringing up the fabric", (0.0, 0.3)),
    "replay": ("/metrics", (0.2, 3.0)),
    "teardown": ("results:", (0.0, 0.4)),
}
TRIES = [*PHASES, *PHASES]  # each phase twice, SIGINT and SIGTERM alternating


def _bpf_programs() -> set[str]:
    out = subprocess.run(
        ["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True
    )
    return {str(p["id"]) for p in json.loads(out.stdout or "[]")}


def _descendants(pid: int) -> set[int]:
    """Processes whose parent chain leads to pid (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {p for p, parent in parents.items() if parent in frontier} - found
        found |= children
        frontier = children
    return found


def _start(
    scenario: Path, out: Path, prefix: str, state: Path, tdf: str = "8000"
) -> subprocess.Popen[str]:
    cmd = [
        str(Path(sys.executable).parent / "emulate"),
        "run",
        str(scenario),
        "--tdf",
        tdf,
        "--out",
        str(out),
        "--no-progress",
        "--netns-prefix",
        prefix,
    ]
    # a private TMPDIR: what the run writes there (its generated trace) must be gone after it
    (state / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "CHAKRA_EMULATOR_STATE_DIR": str(state), "TMPDIR": str(state / "tmp")}
    return subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _lines(proc: subprocess.Popen[str]) -> tuple[queue.Queue[str], list[str]]:
    """Both output streams, line by line as they come (a queue), and everything read (a list)."""
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []

    def pump(stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            seen.append(line)
            lines.put(line)

    for stream in (proc.stdout, proc.stderr):
        threading.Thread(target=pump, args=(stream,), daemon=True).start()
    return lines, seen


def _wait_for(lines: queue.Queue[str], marker: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if marker in lines.get(timeout=0.05):
                return True
        except queue.Empty:
            continue
    return False


def test_signals_at_random_moments_leave_partial_results_and_a_clean_machine(
    fabric_env: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "mini.yaml"
    scenario.write_text(MINI % "auto")
    rng = random.Random(20261123)
    netns_before, bpf_before = _netns(), _bpf_programs()
    outcomes = []
    for i, phase in enumerate(TRIES):
        out = tmp_path / f"out{i}"
        sig = (signal.SIGINT, signal.SIGTERM)[i % 2]
        marker, (low, high) = PHASES[phase]
        offset = rng.uniform(low, high)
        proc = _start(scenario, out, fabric_env, tmp_path)
        lines, seen = _lines(proc)
        try:
            if marker is not None:
                assert _wait_for(lines, marker, 120), f"{phase}: no {marker!r} in {seen}"
            time.sleep(offset)
            finished_first = proc.poll() is not None
            proc.send_signal(sig)
            sent = time.monotonic()
            proc.wait(timeout=60)
            took = time.monotonic() - sent
        finally:
            stop_run(proc, tmp_path)
        time.sleep(0.2)  # the readers drain what is left
        output = "".join(seen)
        where = f"try {i}: {sig.name} {offset:.2f} s into {phase}"
        outcomes.append((where, proc.returncode))
        assert took < EXIT_WITHIN_S, f"{where}: exited {took:.1f} s after the signal"
        if finished_first:
            assert proc.returncode == 0, f"{where}: {output}"
        elif proc.returncode == -sig and "fabric torn down" in output:
            pass  # the signal came after everything was released: it ends the process as usual
        else:
            assert proc.returncode in (0, 130), f"{where}: exit {proc.returncode}: {output}"
            assert "Traceback" not in output, f"{where}: {output}"
        if (out / "summary.json").exists():  # the replay had started: results were flushed
            summary = json.loads((out / "summary.json").read_text())
            assert summary["partial"] is (proc.returncode != 0) or phase == "teardown", where
        assert not list(out.glob(".*")), f"{where}: temporary files left in {out}"
        assert _netns() == netns_before, f"{where}: namespaces left: {_netns() - netns_before}"
        assert _bpf_programs() <= bpf_before, f"{where}: BPF programs left"
        assert not (tmp_path / "state.json").exists(), f"{where}: state file left"
        left = list((tmp_path / "tmp").iterdir())
        assert not left, f"{where}: temporary files left: {left}"
        assert not _descendants(proc.pid), f"{where}: processes left"
    # most tries were really interrupted, not finished before the signal
    assert sum(code != 0 for _, code in outcomes) >= len(TRIES) - 2, outcomes


def test_after_sigkill_emulate_clean_restores_the_machine(fabric_env: str, tmp_path: Path) -> None:
    scenario = tmp_path / "mini.yaml"
    scenario.write_text((MINI % "auto").replace("4194304", "67108864"))
    netns_before, bpf_before = _netns(), _bpf_programs()
    proc = _start(scenario, tmp_path / "out", fabric_env, tmp_path)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        for line in proc.stderr:  # the replay is running once the exporter is up
            if "/metrics" in line or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        workers = _descendants(proc.pid)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        stop_run(proc, tmp_path)
    try:
        _check_clean_after_kill(tmp_path, workers, netns_before, bpf_before)
    finally:  # whatever failed, nothing of this run stays on the machine
        stop_run(proc, tmp_path, clean_after=True)


def _check_clean_after_kill(
    tmp_path: Path, workers: set[int], netns_before: set[str], bpf_before: set[str]
) -> None:
    assert _netns() != netns_before  # SIGKILL leaves the fabric behind...
    # ...and the engine's workers notice their coordinator is gone and exit on their own
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if os.path.exists(f"/proc/{w}")]
    for w in left:  # only processes this test's run started
        os.kill(w, signal.SIGKILL)
    clean = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "clean"],
        env={**os.environ, "CHAKRA_EMULATOR_STATE_DIR": str(tmp_path)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr
    assert _netns() == netns_before
    assert _bpf_programs() <= bpf_before
    # the killed run's generated trace set, named in its state file, is gone too
    assert not list((tmp_path / "tmp").iterdir()), clean.stdout
    assert "removed folder " in clean.stdout, clean.stdout
    assert not left, f"engine workers still running 10 s after their coordinator died: {left}"


def test_a_second_run_while_one_is_active_refuses_and_leaves_the_first_alone(
    fabric_env: str, tmp_path: Path
) -> None:
    scenario = tmp_path / "mini.yaml"
    scenario.write_text(MINI % "auto")
    first = _start(scenario, tmp_path / "first", fabric_env, tmp_path)
    try:
        lines, seen = _lines(first)
        assert _wait_for(lines, "/metrics", 120), seen
        # another prefix, so only the state file (one fabric at a time) can stop it
        second = _start(scenario, tmp_path / "second", fabric_env + "b", tmp_path)
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        last = err.strip().splitlines()[-1]  # after its progress lines, one error line
        assert "error:" in last and str(first.pid) in last and "Traceback" not in err, err
        assert not (tmp_path / "second").exists()
        assert first.wait(timeout=120) == 0, "".join(seen)
    finally:
        stop_run(first, tmp_path)
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert summary["partial"] is False
