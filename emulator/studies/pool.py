"""Where a study's runs execute: here, one after another (LocalPool), or as tasks spread over the
nodes of a Ray cluster (emulator.studies.ray_pool.RayPool, `emulate study ... --cluster ADDRESS`);
emulator.studies.launch.study_pool gives a study command its pool.

A study submits each run as a line saying what it is, the results folder it must end up in, and
a call that writes a results folder where it is told to; then it takes the folders back in the
order it submitted them and analyses them as always. Here a run starts when it is submitted. On a
cluster every run is a task: it runs on whichever node has a core free, in a folder of that
node's, and its results folder comes back to the one named here, whole or not at all.

Only the backends that run in simulated time go to a cluster (SIMULATED_TIME_BACKENDS): each of
them is one process that owns no machine resource. An emulated run needs a machine of its own
(its timing is the machine's), so a study of emulated runs over a cluster is refused.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from emulator.errors import InputError

# A run: given the results folder to write, write it and return it.
RunCall = Callable[[Path], Path]

SIMULATED_TIME_BACKENDS = ("sim", "flow")


class RunPool(Protocol):
    """What a study's runs go through."""

    @property
    def remote(self) -> bool:
        """True when the runs execute elsewhere (no terminal of ours, no machine of ours)."""
        ...

    def submit(self, line: str, out_dir: Path, call: RunCall) -> None:
        """Run `call` into `out_dir`; `line` says which run it is (the study's wording)."""
        ...

    def results(self) -> list[Path]:
        """The results folders of every run submitted since the last call, in submit order,
        once all have finished (the first failure raised, naming its run)."""
        ...


class LocalPool:
    """Each run here, at once, in the study's own process."""

    remote = False

    def __init__(self, say: Callable[[str], None] = lambda line: None) -> None:
        self._say = say
        self._done: list[Path] = []

    def submit(self, line: str, out_dir: Path, call: RunCall) -> None:
        self._say(line)
        self._done.append(call(out_dir))

    def results(self) -> list[Path]:
        done, self._done = self._done, []
        return done


def check_pool_backend(pool: RunPool | None, backend: str, where: object) -> None:
    """Refuse, in one line naming `where` (a scenario file), runs of an emulated backend over a
    cluster."""
    if pool is None or not pool.remote or backend in SIMULATED_TIME_BACKENDS:
        return
    raise InputError(
        f"{where}: --cluster: its runs take the {backend} backend, whose timing is the machine's; "
        f"a study over a cluster runs the simulated-time backends "
        f"({', '.join(SIMULATED_TIME_BACKENDS)}): give --backend sim or flow"
    )


def scenario_run(
    pool: RunPool, runner: Callable[..., Path], scenario: Any, settings: Any
) -> RunCall:
    """The call of a study whose runner takes (scenario, out_dir, settings): with no progress
    line when the run executes elsewhere."""
    if pool.remote and getattr(settings, "progress", False):
        settings = dataclasses.replace(settings, progress=False)
    return functools.partial(_scenario_run, runner, scenario, settings)


def _scenario_run(runner: Callable[..., Path], scenario: Any, settings: Any, out_dir: Path) -> Path:
    return runner(scenario, out_dir, settings)
