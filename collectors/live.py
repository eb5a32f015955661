"""Live counters of a run: plain numbers the recorder increments on the hot path, read by the
Prometheus collector at scrape time (collectors.prometheus).

Label sets are bounded by construction: ranks, collective types, iterations (only the most
recent `max_iterations` are kept), switch ports; never a flow id. One lock guards every update
and the scrape-time snapshot, because the exporter's HTTP thread reads while the run writes.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emulator.latency import LatencyHistogram

if TYPE_CHECKING:
    from collectors.attribution import PortShare

# FCT histogram bucket upper bounds (seconds, target timescale): 1-2-5 steps from 1 us to 100 s,
# covering a 4 KB message at 400 Gb/s up to a multi-GB collective on a congested link.
FCT_BUCKETS_S: tuple[float, ...] = (
    *(float(f"{m}e{e}") for e in range(-6, 2) for m in (1, 2, 5)),
    100.0,
)

# The fidelity verdict's server label for the whole run (a cluster's servers go by their names).
ALL_SERVERS = "all"

# Per-rank congestion counters, in the order of emulator.events.FlowFinished's counts.
CONGESTION_COUNTERS = ("packets", "retransmitted_packets", "ce_marks", "cnps_sent", "cnps_received")


@dataclass(frozen=True)
class RunInfo:
    """What identifies a run in the live metrics and the summary."""

    scenario: str
    tdf: float
    marker: str
    fabric: str


@dataclass
class FctHistogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(FCT_BUCKETS_S))
    count: int = 0
    sum_s: float = 0.0

    def observe(self, value_s: float) -> None:
        index = bisect.bisect_left(FCT_BUCKETS_S, value_s)
        if index < len(self.buckets):
            self.buckets[index] += 1
        self.count += 1
        self.sum_s += value_s

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(FCT_BUCKETS_S, self.buckets, strict=True):
            running += n
            out.append((f"{bound:g}", float(running)))
        out.append(("+Inf", float(self.count)))
        return out


@dataclass
class IterationStats:
    """Completed instances of one collective type in one iteration."""

    instances: int = 0
    completion_time_sum_s: float = 0.0
    busbw_sum_bytes_per_s: float = 0.0
    busbw_instances: int = 0


class LiveMetrics:
    """Counters and gauges of one run; see collectors.prometheus for the exported names."""

    def __init__(self, info: RunInfo, max_iterations: int = 200) -> None:
        self.info = info
        self.max_iterations = max_iterations
        self.lock = threading.Lock()
        self.target_time_s = 0.0
        self.flows_started: defaultdict[str, int] = defaultdict(int)
        self.flows_completed: defaultdict[str, int] = defaultdict(int)
        self.flow_bytes_completed: defaultdict[str, int] = defaultdict(int)
        self.fct: defaultdict[str, FctHistogram] = defaultdict(FctHistogram)
        self.collectives_completed: defaultdict[str, int] = defaultdict(int)
        self.iterations: dict[tuple[str, int], IterationStats] = {}
        self.ideal_busbw_bytes_per_s: dict[str, float] = {}
        # (rank, collective type) -> counts in CONGESTION_COUNTERS order.
        self.congestion: defaultdict[tuple[int, str], list[int]] = defaultdict(
            lambda: [0] * len(CONGESTION_COUNTERS)
        )
        self.nic_bytes: defaultdict[tuple[int, str], int] = defaultdict(int)
        self.nic_utilization: dict[tuple[int, str], float] = {}
        self.qp_rate_bps: dict[tuple[int, int], float] = {}
        # (switch, port) -> [tx_bytes, tx_packets, ecn_marks, drops] accumulated deltas.
        self.port_totals: defaultdict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * 4)
        self.port_queue_bytes: dict[tuple[str, str], int] = {}
        # (switch, port) -> [PFC-equivalent pause seconds, pauses] accumulated deltas
        self.port_pause: defaultdict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.port_utilization: dict[tuple[str, str], float] = {}
        # (switch, port, collective type, job) -> [tx bytes, ECN marks, queue byte-seconds,
        # PFC-equivalent pause seconds] (collectors.attribution's rows, accumulated)
        self.port_collective: defaultdict[tuple[str, str, str, str], list[float]] = defaultdict(
            lambda: [0.0] * 4
        )
        self.cpu_busy_ratio: float | None = None
        self.cpu_busy_by_server: dict[str, float] = {}  # a run over a cluster
        # the fidelity verdict by server ("all": the whole run; a cluster's servers by name),
        # (verdict, reasons): "running" until the run is judged
        self.fidelity: dict[str, tuple[str, int]] = {ALL_SERVERS: ("running", 0)}
        # one-way latency per traffic class, read at scrape time from the engine (its workers'
        # last reports); None until a run's engine is there
        self.latency_source: Callable[[], Mapping[int, LatencyHistogram]] | None = None
        # the tester's per-rank counters (collectors.queue_pairs.rank_totals), set by the run
        # once the engine hands its queue pairs' counters over, at the end
        self.queue_pair_source: Callable[[], Mapping[str, Mapping[str, int]]] | None = None

    def advance(self, time_s: float) -> None:
        if time_s > self.target_time_s:
            self.target_time_s = time_s

    def add_attribution(self, rows: Iterable[PortShare]) -> None:
        """Window rows of collectors.attribution (simulated per instance, emulated per class),
        summed per port and collective type."""
        for row in rows:
            totals = self.port_collective[(row.switch, row.port, row.collective_type, row.job)]
            totals[0] += row.tx_bytes
            totals[1] += row.ecn_marks
            totals[2] += row.queue_byte_s or 0.0
            totals[3] += row.pause_s or 0.0

    def judged(self, verdict: str, reasons: int, parts: Mapping[str, tuple[str, int]]) -> None:
        """The run's fidelity verdict (and each part's: a cluster's servers) once judged."""
        with self.lock:
            self.fidelity = {ALL_SERVERS: (verdict, reasons), **parts}

    def add_congestion(self, rank: int, collective_type: str, index: int, delta: int) -> None:
        if delta > 0:
            self.congestion[(rank, collective_type)][index] += delta

    def collective_completed(
        self,
        collective_type: str,
        iteration: int,
        completion_time_s: float,
        busbw_bytes_per_s: float | None,
        ideal_busbw_bytes_per_s: float | None,
    ) -> None:
        self.collectives_completed[collective_type] += 1
        key = (collective_type, iteration)
        stats = self.iterations.get(key)
        if stats is None:
            stats = self.iterations[key] = IterationStats()
            self._forget_old_iterations()
        stats.instances += 1
        stats.completion_time_sum_s += completion_time_s
        if busbw_bytes_per_s is not None:
            stats.busbw_sum_bytes_per_s += busbw_bytes_per_s
            stats.busbw_instances += 1
        if ideal_busbw_bytes_per_s is not None:
            self.ideal_busbw_bytes_per_s[collective_type] = ideal_busbw_bytes_per_s

    def _forget_old_iterations(self) -> None:
        iterations = sorted({it for _, it in self.iterations})
        if len(iterations) > self.max_iterations:
            keep = set(iterations[-self.max_iterations :])
            self.iterations = {k: v for k, v in self.iterations.items() if k[1] in keep}
