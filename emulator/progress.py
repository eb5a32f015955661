"""The run's progress line on stderr: collectives and iterations done, elapsed and estimated wall
time, and the aggregate NIC throughput in the target timescale.

On a terminal the line is redrawn in place; otherwise (a log, CI) a full line is printed every
`log_every_s`. The estimate is elapsed x remaining / done over collectives, which follows the run
once a few collectives are in; before that it is the ideal job time x TDF.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _rate(bps: float) -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if bps >= factor:
            return f"{bps / factor:.3g} {prefix}b/s"
    return f"{bps:.3g} b/s"


@dataclass
class ProgressState:
    collectives_done: int = 0
    iterations_done: int = 0
    target_throughput_bps: float = 0.0


class ProgressLine:
    def __init__(
        self,
        collectives_total: int,
        iterations_total: int,
        ideal_wall_s: float,
        stream: TextIO | None = None,
        enabled: bool = True,
        log_every_s: float = 10.0,
    ) -> None:
        self.collectives_total = max(collectives_total, 1)
        self.iterations_total = iterations_total
        self.ideal_wall_s = ideal_wall_s
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        self.start = time.monotonic()
        self._last_log = -1e9
        self._drawn = False

    def text(self, state: ProgressState, now: float | None = None) -> str:
        elapsed = (time.monotonic() if now is None else now) - self.start
        done = state.collectives_done
        if done:
            left = elapsed * (self.collectives_total - done) / done
        else:
            left = max(self.ideal_wall_s - elapsed, 0.0)
        width = 20
        filled = min(width, int(width * done / self.collectives_total))
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] "
            f"collectives {done}/{self.collectives_total}  "
            f"iterations {state.iterations_done}/{self.iterations_total}  "
            f"elapsed {_clock(elapsed)}  left ~{_clock(left)}  "
            f"{_rate(state.target_throughput_bps)} (target)"
        )

    def update(self, state: ProgressState) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r\x1b[2K" + self.text(state, now))
            self._drawn = True
        elif now - self._last_log >= self.log_every_s:
            self.stream.write(self.text(state, now) + "\n")
            self._last_log = now
        self.stream.flush()

    def done(self, state: ProgressState) -> None:
        if not self.enabled:
            return
        if self.tty and self._drawn:
            self.stream.write("\r\x1b[2K" + self.text(state) + "\n")
        else:
            self.stream.write(self.text(state) + "\n")
        self.stream.flush()


def say(message: str, stream: TextIO | None = None) -> None:
    """A status line of the run (bring-up, calibration, teardown)."""
    out = stream or sys.stderr
    out.write(f"emulate run: {message}\n")
    out.flush()
