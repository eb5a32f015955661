"""Runs a system test started as a separate process: stopping one that was left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def stop_run(proc: subprocess.Popen[str], state: Path, *, clean_after: bool = False) -> None:
    """A run this test started and left running (an assertion failed): Ctrl-C it like a user
    would; if it does not go, kill it and let `emulate clean` release its fabric (also with
    clean_after, for a run the test killed on purpose)."""
    killed = False
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed = True
    if (killed or clean_after) and (state / "state.json").exists():
        subprocess.run(
            [sys.executable, "-m", "emulator.cli", "clean"],
            env={**os.environ, "CHAKRA_EMULATOR_STATE_DIR": str(state)},
            cwd=REPO,
            capture_output=True,
            timeout=120,
            check=False,
        )
