"""The run's sampler thread: NIC counters in every rank's namespace, the fabric's switch ports
(with their eBPF markers' per-attribution-class counters), the machine's CPU, and the progress
line, every `metrics.sample_interval_s` of wall time.

Samples are stamped with target time (wall time since the engine's common start / TDF) and fed
to the recorder, which is thread-safe per batch. Port counters come from each switch
namespace's qdiscs over rtnetlink and its markers' maps (fabrics/counters.py), read at most every
PORT_INTERVAL_MIN_S: each reading of a port with per-class counters adds a row per class to the
attribution table. Nothing is sampled before the engine's start instant but the baseline, read when the
workers are ready and stamped 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from collectors.cpu import CpuSampler
from collectors.nic import NicSampler
from collectors.samples import port_samples
from emulator.events import ClassCounts, PortClassSample, RunEvent
from emulator.progress import ProgressLine, ProgressState

PORT_INTERVAL_MIN_S = 1.0
# A NIC reading slower than this share of the sampling interval has an uncertain time: left out.
READ_SHARE_MAX = 0.05


class Sampler:
    def __init__(
        self,
        on_samples: Callable[[list[RunEvent]], None],
        nic: NicSampler,
        read_ports: Callable[[], list[Any]] | None,
        interval_s: float,
        tdf: float,
        progress: ProgressLine,
        state: Callable[[], ProgressState],
        class_names: Callable[[], dict[int, str]] | None = None,
    ) -> None:
        """`class_names`: the attribution classes' names (emulator.planning.attribution), when the
        ports count by class: their per-class counters are sampled with the rest."""
        self.on_samples = on_samples  # the recorder's on_events: thread-safe per batch
        self.class_names = class_names
        self.nic = nic
        self.read_ports = read_ports
        self.interval_s = interval_s
        self.tdf = tdf
        self.progress = progress
        self.state = state
        self.cpu = CpuSampler()
        self.start_wall_s: float | None = None
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="run-sampler", daemon=True)
        self._last_ports = -1e9
        self._last_nic: dict[int, int] = {}
        self._last_t: float | None = None
        self.throughput_bps = 0.0

    def start(self) -> None:
        self._thread.start()

    def take_baseline(self) -> None:
        """Every counter's baseline (ports, NICs, CPU), read when the workers are ready and
        before the replay's start, stamped 0: what the first burst does (its drops, its marks)
        counts."""
        try:
            with self._lock:
                self._sample_once(True, time.perf_counter())
        except Exception as exc:  # a sampling failure must not kill the run: record it
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def set_start(self, start_wall_s: float) -> None:
        self.start_wall_s = start_wall_s

    def stop(self) -> None:
        """Stop the thread, then take one last sample so the tables end at the run's end."""
        self._stop.set()
        self._thread.join(timeout=10.0)
        if self.start_wall_s is not None:
            try:
                self.sample_once(force_ports=True)
            except Exception as exc:  # the fabric may be gone after a failure: record why
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.start_wall_s is None or time.perf_counter() < self.start_wall_s:
                continue
            try:
                self.sample_once()
            except Exception as exc:  # a sampling failure must not kill the run: record it
                self.errors.append(f"{type(exc).__name__}: {exc}")
                if len(self.errors) > 20:
                    return
            self.progress.update(self.state())

    def sample_once(self, force_ports: bool = False) -> None:
        assert self.start_wall_s is not None
        with self._lock:  # the baseline (coordinator's thread) and the sampler thread
            self._sample_once(force_ports, self.start_wall_s)

    def _sample_once(self, force_ports: bool, start: float) -> None:
        wall = time.perf_counter()
        now_s = max(0.0, (wall - start) / self.tdf)
        nic = self.nic.sample(
            now_s,
            lambda: (time.perf_counter() - start) / self.tdf,
            max_read_s=READ_SHARE_MAX * self.interval_s / self.tdf,
        )
        tx = {e.rank: e.bytes for e in nic if e.direction == "tx"}
        events: list[RunEvent] = list(nic)
        t_end = max((e.time_s for e in nic), default=now_s)
        if self._last_t is not None and t_end > self._last_t:
            delta = sum(tx[r] - self._last_nic.get(r, tx[r]) for r in tx)
            self.throughput_bps = max(delta, 0) * 8 / (t_end - self._last_t)
        self._last_nic, self._last_t = tx, t_end
        cpu = self.cpu.sample(now_s)
        if cpu is not None:
            events.append(cpu)
        if self.read_ports is not None and (
            force_ports or wall - self._last_ports >= PORT_INTERVAL_MIN_S
        ):
            self._last_ports = wall
            counters = self.read_ports()
            events.extend(port_samples(counters, now_s, tdf=self.tdf))
            if self.class_names is not None:
                events.extend(class_samples(counters, now_s, self.tdf, self.class_names()))
        self.on_samples(events)


def class_samples(
    counters: list[Any], time_s: float, tdf: float, names: dict[int, str]
) -> list[PortClassSample]:
    """PortClassSample events from the ports' per-class counters (fabrics.counters'
    `by_class`, wall time and the port's wall rate): byte-time and time above XOFF in target
    seconds (divided by the TDF). Classes with no packet are left out, but a port with per-class
    counters sends its sample even with none (the baseline its first window counts from); a port
    without them (another marker) sends none."""
    out = []
    for c in counters:
        by_class = getattr(c, "by_class", None)
        if by_class is None or not c.rate_bps:
            continue
        pauses = c.pause_s is not None
        counts = tuple(
            ClassCounts(
                i,
                names.get(i, f"class {i}"),
                k.bytes,
                k.packets,
                k.marks,
                k.overflows,
                k.queue_byte_s(c.rate_bps) / tdf,
                k.pause_ns / 1e9 / tdf if pauses else None,
                k.pause_events if pauses else None,
            )
            for i, k in enumerate(by_class)
            if k.packets
        )
        out.append(PortClassSample(time_s, c.node, c.dev, counts))
    return out
