"""One server's engine actor: its part of the fabric, its engine workers, its counters.

Ray runs one per server (emulator.backends.cluster.connect places them, as root, all at once). The
actor is plain Python with no Ray on its data path: it brings its fabric part up (the same
bring-up as one machine, recorded in its own state file, so `emulate clean` on that server
restores it after a SIGKILL of the actor), starts its workers as child processes (the same
worker_main as one machine; they die with the actor, PR_SET_PDEATHSIG), and moves their pipe
messages as opaque bytes: the driver's bridge (emulator.backends.cluster.bridge) long-polls `take` and
calls `deliver`. Its sampler reads its ranks' NICs, its switch ports and its CPU, stamped in
target time from the common start, and hands the samples over with the messages. A worker about
to attach an AF_XDP port's XDP program (engine.send_path af_xdp) asks this actor to record it in
the server's state file first, and waits for its answer (emulator/engine/xdp_ports.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection, wait
from typing import Any

from emulator.engine.params import OffloadChoice
from emulator.engine.worker import worker_main
from emulator.engine.worker_spec import WorkerSpec
from emulator.engine.xdp_ports import ledger_answer, ledger_items
from emulator.events import RunEvent
from emulator.raycluster.sources import source_fingerprint
from fabrics.ownership import STATE_DIR_ENV, clean_state, state_path

TAKE_MAX_ITEMS = 512  # messages per `take` reply (a reply is one Ray object)
STOP_GRACE_S = 1.0


class EngineServer:
    """The actor (ray.remote wraps it in emulator.backends.cluster.connect)."""

    def __init__(self, name: str, state_dir: str | None) -> None:
        # Ray's worker process installs uvloop's policy; pyroute2's netlink sockets (the NIC
        # counters) need asyncio's own loop, as in a run on one machine
        asyncio.set_event_loop_policy(None)
        if state_dir:
            os.environ[STATE_DIR_ENV] = state_dir
        self.name = name
        self.live: Any = None
        self.processes: dict[int, Any] = {}
        self.pipes: dict[int, Connection] = {}
        self.outbox: deque[tuple[Any, ...]] = deque()
        self.cond = threading.Condition()
        self.sampler: Any = None
        self.class_names: dict[int, str] = {}
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        # one long-lived thread starts the workers: PR_SET_PDEATHSIG fires when the thread
        # that forked a child ends, and Ray's call threads are not ours to keep
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="engine-spawner")
        self._reader = threading.Thread(target=self._read_loop, name="engine-reader", daemon=True)
        self._reader.start()

    # -- set-up ---------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        import ray

        return {
            "server": self.name,
            "pid": os.getpid(),
            "euid": os.geteuid(),
            "hostname": socket.gethostname(),
            "cores": os.cpu_count() or 1,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "state_file": str(state_path()),
            "source": source_fingerprint(),
        }

    def clock(self) -> float:
        return time.perf_counter()

    def underlay(self, dev: str, netns: str | None) -> dict[str, Any]:
        """The underlay interface's speed (Mb/s, None when its driver says none: a veth) and
        MTU, as ethtool and ip see them."""
        import json
        import re

        from fabrics.iproute import Cmd, ip, run

        out = run(Cmd("ethtool", (dev,), netns), check=False)
        found = re.search(r"Speed:\s*(\d+)\s*Mb/s", out)
        links = json.loads(
            run(ip("-j", "link", "show", "dev", dev, netns=netns), check=False) or "[]"
        )
        return {
            "speed_mbps": int(found.group(1)) if found else None,
            "mtu": links[0].get("mtu") if links else None,
        }

    def bring_up(
        self, fabric: Any, tdf: float, prefix: str, part: Any, ports: tuple[int, ...]
    ) -> dict[str, Any]:
        """This server's part of the Clos (`part`), or its interfaces toward a DUT (`ports`):
        the netns of each local rank and the metadata."""
        from fabrics.dut import bring_up_dut
        from fabrics.netns import bring_up
        from fabrics.spec import DutSpec
        from fabrics.topology import build_clos

        said: list[str] = []
        if isinstance(fabric, DutSpec):
            # the allowlist is checked here too: every server refuses what it does not allow
            self.live = bring_up_dut(fabric, prefix=prefix, ports=ports)
        else:
            self.live = bring_up(
                build_clos(fabric),
                rate_scale=1 / tdf,
                delay_scale=tdf,
                marker=fabric.marker,
                prefix=prefix,
                progress=said.append,
                part=part,
            )
        live = self.live
        return {
            "metadata": live.metadata(),
            "rank_netns": {r: live.rank_netns(r) for r in live.local_ranks},
            "said": said,
        }

    def fabric_metadata(self) -> dict[str, Any]:
        """The part's metadata as it is now (what its underlay guards dropped so far)."""
        return {} if self.live is None else self.live.metadata()

    def calibrate(
        self, path_mtu_bytes: int, shape: Any, refresh: bool, native: OffloadChoice
    ) -> Any:
        """This server's load curve for its share on the data path its workers will take
        (engine.native `native`; emulator.timescale.curve; cached here)."""
        from emulator.backends.engine.load_curve import calibrate

        return calibrate(path_mtu_bytes, shape, native=native, refresh=refresh)

    def launch(self, spec: WorkerSpec, start_method: str) -> int:
        return self._spawner.submit(self._launch, spec, start_method).result()

    def _launch(self, spec: WorkerSpec, start_method: str) -> int:
        ctx: Any = multiprocessing.get_context(start_method)
        parent, child = ctx.Pipe(duplex=True)
        process = ctx.Process(
            target=worker_main, args=(spec, child), name=f"engine-worker-{spec.index}", daemon=True
        )
        process.start()
        child.close()
        with self.cond:
            self.processes[spec.index] = process
            self.pipes[spec.index] = parent
        os.write(self._wake_w, b"w")  # the reader waits on the new pipe from now on
        return int(process.pid)

    # -- the bridge -----------------------------------------------------------------------
    def deliver(self, batch: list[tuple[int, bytes]]) -> None:
        """Messages from the coordinator to workers, as the coordinator pickled them."""
        for index, data in batch:
            pipe = self.pipes.get(index)
            if pipe is not None and self.processes[index].is_alive():
                with contextlib.suppress(OSError):
                    pipe.send_bytes(data)

    def take(self, timeout_s: float) -> list[tuple[Any, ...]]:
        """What happened since the last call, waiting up to timeout_s for something:
        ("msg", worker, bytes), ("exit", worker, exitcode), ("samples", [events])."""
        with self.cond:
            if not self.outbox:
                self.cond.wait(timeout_s)
            out: list[tuple[Any, ...]] = []
            while self.outbox and len(out) < TAKE_MAX_ITEMS:
                out.append(self.outbox.popleft())
            return out

    def _put(self, item: tuple[Any, ...]) -> None:
        with self.cond:
            self.outbox.append(item)
            self.cond.notify_all()

    def _read_loop(self) -> None:
        while not self._stopping.is_set():
            with self.cond:
                handles: dict[Any, tuple[str, int]] = {self._wake_r: ("wake", -1)}
                for index, pipe in self.pipes.items():
                    handles[pipe] = ("pipe", index)
                    handles[self.processes[index].sentinel] = ("exit", index)
            for ready in wait(list(handles), 0.5):
                kind, index = handles[ready]
                if kind == "wake":
                    os.read(self._wake_r, 4096)
                elif kind == "pipe":
                    self._drain(index)
                else:  # the worker is gone: its last messages first, then its exit
                    self._drain(index)
                    process = self.processes[index]
                    process.join(0.5)
                    with self.cond:
                        self.pipes.pop(index, None)
                    self._put(("exit", index, process.exitcode))

    def _drain(self, index: int) -> None:
        pipe = self.pipes.get(index)
        while pipe is not None:
            try:
                if not pipe.poll():
                    return
                data = pipe.recv_bytes()
            except (EOFError, OSError):
                return
            items = ledger_items(data)
            if items is not None:  # an AF_XDP port about to attach: this server's ledger
                self._record(pipe, items)
                continue
            self._put(("msg", index, data))

    def _record(self, pipe: Connection, items: list[dict[str, Any]]) -> None:
        """A worker's XDP attachment, recorded in this server's state file before the worker
        attaches it (engine.send_path af_xdp), then acknowledged; `emulate clean` on this
        server finds it after a SIGKILL."""
        ledger = getattr(self.live, "ledger", None)
        answer = ledger_answer(None if ledger is None else ledger.record, items)
        with contextlib.suppress(OSError):
            pipe.send(answer)

    def terminate(self, index: int) -> None:
        process = self.processes.get(index)
        if process is not None and process.is_alive():
            process.terminate()

    def kill(self, index: int) -> None:
        process = self.processes.get(index)
        if process is not None and process.is_alive():
            process.kill()

    # -- counters -------------------------------------------------------------------------
    def prepare_sampling(self, interval_s: float, tdf: float) -> None:
        """A sampler of this server's NICs, ports and CPU, its baseline read now."""
        from collectors.nic import NetlinkCounters, NicSampler
        from emulator.backends.engine.sampling import Sampler
        from emulator.progress import ProgressLine, ProgressState
        from fabrics.counters import read_port_counters
        from fabrics.qdisc_stats import QdiscStats
        from fabrics.spec import DutSpec
        from fabrics.topology import HOST_IFNAME

        live = self.live
        dut = isinstance(getattr(live, "spec", None), DutSpec)
        if dut:  # one reading per port, under its first rank (as emulator.backends.engine)
            spec = live.spec
            sources = {
                r: NetlinkCounters(spec.rank_interface(r), live.rank_netns(r))
                for r in live.local_ranks
                if r % spec.ranks_per_interface == 0
            }
        else:
            sources = {
                r: NetlinkCounters(HOST_IFNAME, live.rank_netns(r)) for r in live.local_ranks
            }
        qdiscs = self._qdiscs = QdiscStats()  # closed by stop_sampling, as the NICs' sockets
        self.sampler = Sampler(
            self._samples,
            NicSampler(sources),
            None if dut else lambda: list(read_port_counters(live, qdiscs=qdiscs).values()),
            interval_s,
            tdf,
            ProgressLine(1, 0, 0.0, enabled=False),
            ProgressState,
            class_names=(lambda: self.class_names) if live.marker_name == "ebpf" else None,
        )
        self._nic_sources = sources
        self.sampler.take_baseline()

    def _samples(self, events: list[RunEvent]) -> None:
        if events:
            self._put(("samples", events))

    def start_sampling(self, start_local_s: float) -> None:
        self.sampler.set_start(start_local_s)
        self.sampler.start()

    def set_class_names(self, names: dict[int, str]) -> None:
        self.class_names = dict(names)

    def stop_sampling(self) -> list[str]:
        """The last sample (into the outbox) and the sampler's errors."""
        if self.sampler is None:
            return []
        sampler, self.sampler = self.sampler, None
        sampler.stop()
        for source in self._nic_sources.values():
            source.close()
        self._qdiscs.close()
        return list(sampler.errors)

    # -- teardown -------------------------------------------------------------------------
    def teardown(self) -> list[str]:
        """Stop the workers and the sampler, release the fabric part; what was removed."""
        self.stop_sampling()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in list(self.processes.values()):
            if process.is_alive():
                process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(0.5)
        self._stopping.set()
        self._spawner.shutdown(wait=False)
        live, self.live = self.live, None
        if live is None:
            return []
        return list(live.close())


def clean_server(state_dir: str | None) -> list[str]:
    """What `emulate clean` does, on a server whose actor died: release what its state file
    lists (refused while the process that wrote it runs)."""
    if state_dir:
        os.environ[STATE_DIR_ENV] = state_dir
    cleaned = clean_state(state_path())
    return [] if cleaned is None else cleaned[0]
