"""What `run_scenario` takes besides the scenario, and what it returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.backends.base import BackendOptions
from emulator.progress import say


@dataclass(frozen=True)
class RunOptions:
    out_dir: Path | None = None  # None: <metrics.results_dir>/<name>-<UTC timestamp>
    progress: bool = True  # the progress line on stderr
    tdf: float | None = None  # overrides run.time_dilation
    recalibrate: bool = False  # measure the machine again instead of using the cached value
    fabric_prefix: str = "emu-"  # namespace name prefix of the fabric
    report: bool = True  # print the summary table and the results' paths at the end
    backend: str | None = None  # overrides run.backend (emulator.backends.BACKENDS)
    reference: str | None = None  # "sim": also simulate the scenario and compare (--reference)
    cluster: str | None = None  # a Ray cluster's address: overrides run.cluster.address
    say: Callable[[str], None] = field(default=say, compare=False)


@dataclass
class RunResult:
    out_dir: Path
    summary: dict[str, Any]
    partial: bool
    failed_expectations: int = 0  # the scenario's `expect:` entries that FAILED


def backend_options(options: RunOptions) -> BackendOptions:
    """What the backend is told of them (emulator.backends.base)."""
    return BackendOptions(
        say=options.say,
        fabric_prefix=options.fabric_prefix,
        recalibrate=options.recalibrate,
        cluster=options.cluster,
        tdf=options.tdf,
    )
