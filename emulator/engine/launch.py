"""Where the coordinator's workers run: a launcher starts each shard's worker process and hands back
the pipe the coordinator talks to it on and a handle to watch it by.

On one machine (LocalLauncher) a worker is a multiprocessing child and its pipe a real pipe.
Across servers (emulator.backends.cluster) a worker is a child of that server's engine actor, its pipe the
near end of a bridge that carries the same messages over Ray, and its handle reports the remote
process's exit. The coordinator cannot tell them apart but for `where` (named in its errors) and
`clock_offset_s`: a server's perf_counter minus this one's, so the common start instant the
coordinator sends ("go", t) is a time in the worker's own clock.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, Protocol

from emulator.engine.plan import RankEndpoint
from emulator.engine.worker import worker_main
from emulator.engine.worker_spec import WorkerSpec
from emulator.signals import signals_deferred


def shard_ranks(ranks: Sequence[RankEndpoint], workers: int) -> list[tuple[RankEndpoint, ...]]:
    """Round-robin NICs over at most `workers` shards (0: one per core), none empty: a rank
    with its own NIC is one unit, ranks sharing a NIC go together (they share its arbiter)."""
    groups: dict[object, list[RankEndpoint]] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        groups.setdefault(("nic", r.nic) if r.nic is not None else ("rank", r.rank), []).append(r)
    units = list(groups.values())
    n = workers or (os.cpu_count() or 1)
    n = max(1, min(n, len(units)))
    return [tuple(r for unit in units[i::n] for r in unit) for i in range(n)]


class WorkerProcess(Protocol):
    """What the coordinator watches a worker by (multiprocessing.Process has all of it)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def sentinel(self) -> int: ...  # readable once the worker is gone (connection.wait)

    @property
    def exitcode(self) -> int | None: ...

    def is_alive(self) -> bool: ...

    def join(self, timeout: float | None = None) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    def shards(self, ranks: Sequence[RankEndpoint], workers: int) -> list[tuple[RankEndpoint, ...]]:
        """The ranks grouped by worker, each group able to run in one process where it is."""
        ...

    def launch(self, spec: WorkerSpec) -> tuple[WorkerProcess, Connection]:
        """Start shard `spec.index`'s worker; its pipe and its process handle."""
        ...

    def where(self, index: int) -> str:
        """Where worker `index` runs, for messages ("" on this machine)."""
        ...

    def clock_offset_s(self, index: int) -> float:
        """Worker `index`'s perf_counter minus the coordinator's (0 on this machine)."""
        ...

    def server_of(self, index: int) -> str:
        """The server worker `index` runs on ("" on this machine)."""
        ...


class LocalLauncher:
    """Workers as child processes of this one (multiprocessing, engine.start_method)."""

    def __init__(self, start_method: str) -> None:
        self.context: Any = multiprocessing.get_context(start_method)

    def shards(self, ranks: Sequence[RankEndpoint], workers: int) -> list[tuple[RankEndpoint, ...]]:
        return shard_ranks(ranks, workers)

    def launch(self, spec: WorkerSpec) -> tuple[WorkerProcess, Connection]:
        parent, child = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=worker_main, args=(spec, child), name=f"engine-worker-{spec.index}", daemon=True
        )
        # a Ctrl-C in the middle of start() cut the child's bootstrap data short and it
        # printed a traceback: the signal waits until the child has what it needs
        with signals_deferred():
            process.start()
        child.close()
        return process, parent

    def where(self, index: int) -> str:
        del index
        return ""

    def clock_offset_s(self, index: int) -> float:
        del index
        return 0.0

    def server_of(self, index: int) -> str:
        del index
        return ""
