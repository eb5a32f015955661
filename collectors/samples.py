"""NIC and switch-port samples turned into rows with per-interval bytes and utilization.

Samples carry cumulative counters; a row holds the difference to the previous sample of the same
interface and the utilization over that interval: delta_bytes x 8 / (interval_s x line_rate_bps),
both in the target timescale (time dilation cancels out). The first sample of an interface only
sets the baseline. Utilization is not clipped: a value slightly above 1 shows sampling jitter
rather than hiding it. A counter that goes backwards (interface re-created) restarts the baseline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from emulator.events import NicSample, PortSample


@dataclass(frozen=True, slots=True)
class NicRow:
    time_s: float
    rank: int
    direction: str
    bytes: int
    delta_bytes: int
    interval_s: float
    utilization: float


@dataclass(frozen=True, slots=True)
class PortRow:
    time_s: float
    switch: str
    port: str
    tx_bytes: int
    tx_packets: int
    ecn_marks: int
    drops: int
    queue_bytes: int
    delta_bytes: int
    interval_s: float
    utilization: float
    pause_s: float | None = None  # PFC-equivalent pause time so far (cumulative, target s)
    pause_events: int | None = None  # PFC-equivalent pauses so far (cumulative)


@dataclass(frozen=True, slots=True)
class CpuRow:
    time_s: float
    busy_ratio: float
    server: str = ""  # a run over a cluster: the server ("driver": the coordinator's machine)


def utilization(delta_bytes: int, interval_s: float, line_rate_bps: float) -> float:
    if interval_s <= 0.0 or line_rate_bps <= 0.0:
        return 0.0
    return delta_bytes * 8.0 / (interval_s * line_rate_bps)


class NicTable:
    """Rows of NIC samples; line_rate_bps is the emulated (target) NIC rate."""

    def __init__(self, line_rate_bps: float) -> None:
        self.line_rate_bps = line_rate_bps
        self.rows: list[NicRow] = []
        self._last: dict[tuple[int, str], tuple[float, int]] = {}

    def add(self, sample: NicSample) -> NicRow | None:
        key = (sample.rank, sample.direction)
        last = self._last.get(key)
        self._last[key] = (sample.time_s, sample.bytes)
        if last is None or sample.bytes < last[1] or sample.time_s <= last[0]:
            return None
        delta = sample.bytes - last[1]
        interval = sample.time_s - last[0]
        row = NicRow(
            time_s=sample.time_s,
            rank=sample.rank,
            direction=sample.direction,
            bytes=sample.bytes,
            delta_bytes=delta,
            interval_s=interval,
            utilization=utilization(delta, interval, self.line_rate_bps),
        )
        self.rows.append(row)
        return row


class PortTable:
    """Rows of switch-port samples; default_line_rate_bps where a sample carries no rate."""

    def __init__(self, default_line_rate_bps: float) -> None:
        self.default_line_rate_bps = default_line_rate_bps
        self.rows: list[PortRow] = []
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def add(self, sample: PortSample) -> PortRow:
        key = (sample.switch, sample.port)
        last = self._last.get(key)
        self._last[key] = (sample.time_s, sample.tx_bytes)
        delta, interval = 0, 0.0
        if last is not None and sample.tx_bytes >= last[1] and sample.time_s > last[0]:
            delta, interval = sample.tx_bytes - last[1], sample.time_s - last[0]
        rate = sample.line_rate_bps or self.default_line_rate_bps
        # Unlike NIC rows, the first port sample is kept: its queue depth is a measurement.
        row = PortRow(
            time_s=sample.time_s,
            switch=sample.switch,
            port=sample.port,
            tx_bytes=sample.tx_bytes,
            tx_packets=sample.tx_packets,
            ecn_marks=sample.ecn_marks,
            drops=sample.drops,
            queue_bytes=sample.queue_bytes,
            delta_bytes=delta,
            interval_s=interval,
            utilization=utilization(delta, interval, rate),
            pause_s=sample.pause_s,
            pause_events=sample.pause_events,
        )
        self.rows.append(row)
        return row


class PortCountersLike(Protocol):
    """What fabrics.counters.PortCounters provides (the fabrics backend's per-port reading)."""

    @property
    def node(self) -> str: ...

    @property
    def dev(self) -> str: ...

    @property
    def tx_bytes(self) -> int: ...

    @property
    def tx_packets(self) -> int: ...

    @property
    def drops(self) -> int: ...

    @property
    def backlog_bytes(self) -> int: ...

    @property
    def ecn_marks(self) -> int: ...

    @property
    def phantom_queue_bytes(self) -> int | None: ...


def port_samples(
    counters: Iterable[PortCountersLike],
    time_s: float,
    line_rate_bps: float | None = None,
    tdf: float = 1.0,
) -> list[PortSample]:
    """PortSample events from the fabrics backend's counters, stamped with target time `time_s`
    (pause times, wall seconds in the counters, are divided by the TDF).

    The queue reported is the marker's phantom queue where there is one: it is the queue of the
    emulated switch (draining at the emulated rate) that ECN marking acts on; otherwise the real
    qdisc backlog.
    """
    return [
        PortSample(
            time_s=time_s,
            switch=c.node,
            port=c.dev,
            tx_bytes=c.tx_bytes,
            tx_packets=c.tx_packets,
            ecn_marks=c.ecn_marks,
            drops=c.drops,
            queue_bytes=c.phantom_queue_bytes
            if c.phantom_queue_bytes is not None
            else c.backlog_bytes,
            line_rate_bps=line_rate_bps,
            pause_s=None if (p := getattr(c, "pause_s", None)) is None else p / tdf,
            pause_events=getattr(c, "pause_events", None),
        )
        for c in counters
    ]
