"""A study's runs as Ray tasks over a cluster (`emulate study ... --cluster ADDRESS`).

Joining is the cluster backend's (emulator.raycluster.join): this side must hold Ray's
token, the cluster must refuse whoever does not (its GCS and every node's raylet are asked), and
a cluster running its dashboard (an HTTP API that runs jobs) is refused. Each run is one task of
one core: it checks that its node runs the driver's code (a hash of the sources), runs into a
temporary folder of its node, notes in it where it ran (TASK_JSON), and sends the results folder back as a gzipped tar, which is
unpacked here beside the folder it is for and then renamed to it: a study's folder never holds a
half-received run, and a tar that names a path outside its folder, a link or a device is refused
(tarfile's "data" filter). On an error or Ctrl-C the runs still pending are cancelled (each gets
a KeyboardInterrupt: its run ends as on Ctrl-C and its node's folder goes) and waited for, at most
CANCEL_WAIT_S, before this side leaves the cluster.

Files a scenario reads (a trace, comm groups) are read on the node, at the path they have here:
give every node the same checkout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from emulator.errors import EmulatorError, EnvironmentProblem
from emulator.studies.pool import RunCall

CLUSTER_KEY = "--cluster"
TASK_JSON = "cluster_task.json"  # in each run's folder: the node that ran it, its pid, wall time
WHY = "the study's runs execute this machine's code on its nodes"
CANCEL_WAIT_S = 30.0
WAIT_POLL_S = 1.0


def run_task(call: RunCall, fingerprint: str) -> dict[str, Any]:
    """On a node: the run into a folder of the node's, sent back as a gzipped tar."""
    from emulator.raycluster.sources import source_fingerprint

    node = socket.gethostname()
    mine = source_fingerprint()
    if mine != fingerprint:
        raise EnvironmentProblem(
            f"node {node} runs other code (sources {mine}, the driver's {fingerprint}): set up "
            "the same commit on every node"
        )
    import ray

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="emulate-study-") as tmp:
        folder = call(Path(tmp) / "run")
        task = {
            "node_id": ray.get_runtime_context().get_node_id(),
            "hostname": node,
            "pid": os.getpid(),
            "wall_s": round(time.perf_counter() - started, 3),
        }
        (folder / TASK_JSON).write_text(json.dumps(task, indent=2) + "\n")
        return {"archive": pack(folder), **task}


def pack(folder: Path) -> bytes:
    """A results folder as a gzipped tar of its contents."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack(archive: bytes, out_dir: Path) -> None:
    """Write a packed results folder as out_dir (which must not exist): unpacked beside it,
    then renamed, so out_dir is whole or absent. Members outside the folder, links and devices
    are refused (tarfile's "data" filter)."""
    from collectors.results import DIR_MODE

    if out_dir.exists():
        raise EnvironmentProblem(f"{out_dir}: exists already; a run's results would replace it")
    out_dir.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(staging, filter="data")
        staging.chmod(DIR_MODE)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@dataclass
class _Pending:
    line: str
    out_dir: Path
    ref: Any  # ray.ObjectRef of run_task's answer
    done: bool = False


class RayPool:
    """Runs as tasks on the cluster at `address`; a context manager (joins on enter, cancels
    what is pending and leaves on exit)."""

    remote = True

    def __init__(self, address: str, say: Callable[[str], None] = lambda line: None) -> None:
        self.address = address
        self._say = say
        self._pending: list[_Pending] = []
        self._task: Any = None
        self._fingerprint = ""

    def __enter__(self) -> RayPool:
        from emulator.raycluster.join import connect
        from emulator.raycluster.sources import source_fingerprint

        connect(self.address, CLUSTER_KEY, WHY)
        import ray

        self._fingerprint = source_fingerprint()
        self._task = ray.remote(num_cpus=1, max_retries=0)(run_task)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        from emulator.raycluster.join import ray_shutdown

        try:
            self.cancel()
        finally:
            ray_shutdown()

    def submit(self, line: str, out_dir: Path, call: RunCall) -> None:
        if self._task is None:
            raise RuntimeError("RayPool.submit outside its `with`")
        ref = self._task.remote(call, self._fingerprint)
        self._pending.append(_Pending(line, out_dir, ref))
        self._say(f"{line} [sent to the cluster]")

    def results(self) -> list[Path]:
        import ray

        pending = list(self._pending)
        waiting = {p.ref: p for p in pending}
        while waiting:
            ready, _ = ray.wait(list(waiting), num_returns=1, timeout=WAIT_POLL_S)
            for ref in ready:
                run = waiting.pop(ref)
                answer = self._answer(run)
                unpack(answer["archive"], run.out_dir)
                run.done = True
                self._say(
                    f"  done on node {answer['node_id'][:8]} ({answer['hostname']}) in "
                    f"{answer['wall_s']:.1f} s: {run.out_dir}"
                )
        self._pending = []
        return [p.out_dir for p in pending]

    def _answer(self, run: _Pending) -> dict[str, Any]:
        """The task's answer, or its error in one line naming the run."""
        import ray
        from ray.exceptions import RayError, RayTaskError

        try:
            answer: dict[str, Any] = ray.get(run.ref)
        except RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else None
            if isinstance(cause, EmulatorError):
                raise type(cause)(f"{run.out_dir.name} (on the cluster): {cause}") from None
            what = f"{type(cause).__name__}: {cause}" if cause else str(exc).splitlines()[0]
            raise EnvironmentProblem(f"{run.out_dir.name} (on the cluster): {what}") from None
        except RayError as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise EnvironmentProblem(
                f"{run.out_dir.name} (on the cluster): {type(exc).__name__}: {first}"
            ) from None
        return answer

    def cancel(self) -> None:
        """Cancel every run not yet received and wait for them to end (bounded)."""
        import ray

        left = [p.ref for p in self._pending if not p.done]
        self._pending = []
        if not left:
            return
        for ref in left:
            with contextlib.suppress(Exception):
                ray.cancel(ref)
        with contextlib.suppress(Exception):
            ray.wait(left, num_returns=len(left), timeout=CANCEL_WAIT_S)
