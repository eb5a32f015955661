"""What every study settles before its runs start: the backend they take (refused early when it
cannot run here) and the study's default folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from emulator.studies.pool import LocalPool, RunPool, check_pool_backend


def default_out_dir(now: datetime | None = None, study: str = "interference") -> Path:
    """results/<study>-<UTC timestamp>."""
    from collectors.results import default_results_dir

    return default_results_dir(Path("results"), study, now or datetime.now(UTC))


def check_backend(
    scenario: Any,
    where: Path,
    backend_override: str | None,
    tdf: float | None,
    pool: RunPool | None = None,
) -> str:
    """The backend a study's runs of `scenario` take, refused by the backend itself before
    anything runs (--tdf given to a simulation, the emulated fabric without root), or by the
    pool (an emulated backend over a cluster), in one line naming the scenario file."""
    from emulator.backends import BackendOptions, backend_for
    from emulator.errors import EmulatorError
    from emulator.progress import say

    backend = backend_for(scenario, backend_override)
    check_pool_backend(pool, backend.name, where)
    try:
        backend.check(scenario, BackendOptions(say=say, tdf=tdf))
    except EmulatorError as exc:
        raise type(exc)(f"{where}: runs on the {backend.name} backend: {exc}") from None
    return backend.name


def refuse_with_reuse(options: Iterable[tuple[str, object]]) -> None:
    """--reuse takes finished runs: the options that would start new ones, (name, value) with
    None where not given, are refused in one line naming those given."""
    from emulator.errors import InputError

    given = [name for name, value in options if value is not None]
    if given:
        raise InputError(f"--reuse takes finished runs: it excludes {', '.join(given)}")


@contextlib.contextmanager
def study_pool(cluster: str | None, say: Callable[[str], None]) -> Iterator[RunPool]:
    """The pool of a study command: here (cluster None), or the Ray cluster at `cluster`
    (--cluster ADDRESS), joined for the study and left after it."""
    if cluster is None:
        yield LocalPool(say)
        return
    from emulator.studies.ray_pool import RayPool

    with RayPool(cluster, say) as pool:
        yield pool
