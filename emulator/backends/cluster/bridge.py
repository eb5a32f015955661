"""The driver's side of the cluster: each remote worker looks like a local one to the coordinator.

The coordinator (emulator.engine.coordinator) talks to every worker over a pipe and watches a
process handle. For a worker on another server, the pipe's far end is held here: one thread per
server (out) sends what the coordinator wrote to the server's actor (`deliver`, as the pickled
bytes, in order), another (in) long-polls the actor (`take`) and writes the workers' messages
into their pipes, hands the server's counter samples to the run, and reports a worker's exit by
closing its handle's sentinel. When a call to the actor fails (the actor or its server died),
every worker of that server is reported gone with the reason, so the coordinator stops the run
within a poll and names the server.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable, Sequence
from multiprocessing import Pipe
from multiprocessing.connection import Connection, wait
from typing import Any

from emulator.engine.launch import shard_ranks
from emulator.engine.plan import RankEndpoint
from emulator.engine.worker_spec import WorkerSpec
from emulator.events import RunEvent

TAKE_WAIT_S = 0.05  # how long one `take` waits on the actor for something to report
CALL_TIMEOUT_S = 30.0  # a call that takes longer: the server is as good as gone


class RemoteWorker:
    """A worker process on another server, as the coordinator watches it (WorkerProcess)."""

    def __init__(self, link: ServerLink, index: int, pid: int) -> None:
        self.link = link
        self.index = index
        self._pid = pid
        self._r, self._w = os.pipe()
        self._lock = threading.Lock()
        self.exitcode: int | None = None
        self.reason: str | None = None  # why it is gone, when the server says nothing

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def sentinel(self) -> int:
        return self._r

    def exited(self, code: int | None, reason: str | None = None) -> None:
        with self._lock:
            if self._w < 0:
                return
            self.exitcode, self.reason = code, reason
            os.close(self._w)
            self._w = -1

    def is_alive(self) -> bool:
        return self._w >= 0

    def join(self, timeout: float | None = None) -> None:
        if self.is_alive():
            select.select([self._r], [], [], timeout)

    def terminate(self) -> None:
        self.link.call_soon("terminate", self.index)

    def kill(self) -> None:
        self.link.call_soon("kill", self.index)

    def close(self) -> None:
        self.exited(self.exitcode, self.reason)
        with contextlib.suppress(OSError):
            os.close(self._r)


class ServerLink:
    """One server's actor and the pipes of its workers; two pumping threads while it runs."""

    def __init__(
        self,
        name: str,
        actor: Any,
        info: dict[str, Any],
        offset_s: float,
        on_samples: Callable[[list[RunEvent]], None],
    ) -> None:
        self.name = name
        self.actor = actor
        self.info = info
        self.offset_s = offset_s  # the server's perf_counter minus the driver's
        self.on_samples = on_samples
        self.workers: dict[int, RemoteWorker] = {}
        self.ends: dict[int, Connection] = {}  # our end of each worker's pipe
        self.failure: str | None = None
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        self._threads = [
            threading.Thread(target=self._pump_out, name=f"bridge-out-{name}", daemon=True),
            threading.Thread(target=self._pump_in, name=f"bridge-in-{name}", daemon=True),
        ]
        self._started = False

    @property
    def where(self) -> str:
        return f"server {self.name} ({self.info.get('hostname', '?')})"

    def add_worker(self, index: int, pid: int) -> tuple[RemoteWorker, Connection]:
        near, far = Pipe(duplex=True)
        worker = RemoteWorker(self, index, pid)
        self.workers[index] = worker
        self.ends[index] = far
        if self.failure is not None:
            worker.exited(None, self.failure)
        os.write(self._wake_w, b"w")
        if not self._started:
            self._started = True
            for t in self._threads:
                t.start()
        return worker, near

    def call_soon(self, method: str, *args: Any) -> None:
        """A call whose result nobody waits for (stopping a worker)."""
        with contextlib.suppress(Exception):
            getattr(self.actor, method).remote(*args)

    def _pump_out(self) -> None:
        import ray

        while not self._stop.is_set():
            handles: dict[Any, int] = {self._wake_r: -1}
            for index, end in list(self.ends.items()):
                handles[end] = index
            batch: list[tuple[int, bytes]] = []
            for ready in wait(list(handles), 0.2):
                index = handles[ready]
                if index < 0:
                    os.read(self._wake_r, 4096)
                    continue
                end = self.ends[index]
                try:
                    while end.poll():
                        batch.append((index, end.recv_bytes()))
                except (EOFError, OSError):
                    self.ends.pop(index, None)  # the coordinator closed it: nothing more
            if not batch:
                continue
            try:
                ray.get(self.actor.deliver.remote(batch), timeout=CALL_TIMEOUT_S)
            except Exception as exc:
                self._fail(exc)
                return

    def _pump_in(self) -> None:
        import ray

        while not self._stop.is_set():
            try:
                items = ray.get(self.actor.take.remote(TAKE_WAIT_S), timeout=CALL_TIMEOUT_S)
            except Exception as exc:
                self._fail(exc)
                return
            for item in items:
                kind = item[0]
                if kind == "msg":
                    end = self.ends.get(item[1])
                    if end is not None:
                        with contextlib.suppress(OSError):
                            end.send_bytes(item[2])
                elif kind == "exit":
                    worker = self.workers.get(item[1])
                    if worker is not None:
                        worker.exited(item[2])
                elif kind == "samples":
                    self.on_samples(item[1])

    def _fail(self, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        kind = type(exc).__name__
        self.failure = f"{self.where}: its engine actor stopped answering ({kind})"
        for worker in list(self.workers.values()):
            worker.exited(None, self.failure)

    def stop(self) -> None:
        """Stop pumping (after the coordinator stopped the workers)."""
        self._stop.set()
        os.write(self._wake_w, b"w")
        for t in self._threads:
            if t.is_alive():
                t.join(CALL_TIMEOUT_S)
        for worker in self.workers.values():
            worker.close()
        for end in self.ends.values():
            end.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class RemoteLauncher:
    """Workers on the servers of a cluster (emulator.engine.launch.Launcher): each server runs
    the workers of its own ranks, `workers_per_server` of them (0: one per core there)."""

    def __init__(
        self,
        links: Sequence[ServerLink],
        server_of_rank: dict[int, str],
        start_method: str,
        workers_per_server: int,
    ) -> None:
        self.links = {link.name: link for link in links}
        self.order = [link.name for link in links]
        self.server_of_rank = server_of_rank
        self.start_method = start_method
        self.workers_per_server = workers_per_server
        self._server_of_index: list[str] = []

    def shards(self, ranks: Sequence[RankEndpoint], workers: int) -> list[tuple[RankEndpoint, ...]]:
        del workers  # per server, below
        out: list[tuple[RankEndpoint, ...]] = []
        self._server_of_index = []
        for name in self.order:
            mine = [r for r in ranks if self.server_of_rank[r.rank] == name]
            if not mine:
                continue
            cores = int(self.links[name].info.get("cores", 1))
            shards = shard_ranks(mine, self.workers_per_server or cores)
            out += shards
            self._server_of_index += [name] * len(shards)
        return out

    def launch(self, spec: WorkerSpec) -> tuple[RemoteWorker, Connection]:
        import ray

        link = self.links[self._server_of_index[spec.index]]
        pid = ray.get(link.actor.launch.remote(spec, self.start_method), timeout=CALL_TIMEOUT_S)
        return link.add_worker(spec.index, pid)

    def where(self, index: int) -> str:
        return self.links[self._server_of_index[index]].where

    def clock_offset_s(self, index: int) -> float:
        return self.links[self._server_of_index[index]].offset_s

    def server_of(self, index: int) -> str:
        return self._server_of_index[index]
