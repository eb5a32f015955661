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

import numpy as np

from emulator.events import NicSample, NicSamples, PortSample, PortSamples


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


@dataclass(frozen=True, eq=False)
class NicColumns:
    """NicRow's columns for the NICs of one NicSamples event that have a row (`index` into its
    `nics`: those with a previous reading, earlier and not above this one)."""

    time_s: float
    nics: tuple[tuple[int, str], ...]
    index: np.ndarray
    bytes: np.ndarray
    delta_bytes: np.ndarray
    interval_s: np.ndarray
    utilization: np.ndarray


class NicTable:
    """Rows of NIC samples; line_rate_bps is the emulated (target) NIC rate.

    Samples come one NIC counter at a time (NicSample: `rows`) or all at once (NicSamples:
    `columns`, the same values as arrays). A NIC is read one way or the other in a run."""

    def __init__(self, line_rate_bps: float) -> None:
        self.line_rate_bps = line_rate_bps
        self.rows: list[NicRow] = []
        self.columns: list[NicColumns] = []
        self._last: dict[tuple[int, str], tuple[float, int]] = {}
        # by the NicSamples' nics tuple: its last reading (time of each, bytes)
        self._last_columns: dict[
            int, tuple[tuple[tuple[int, str], ...], np.ndarray, np.ndarray]
        ] = {}

    def add_columns(self, sample: NicSamples) -> NicColumns:
        """NicSamples as rows where `add` would make one (element by element, the same values)."""
        now = np.asarray(sample.bytes, dtype=np.int64)
        n = len(sample.nics)
        last = self._last_columns.get(id(sample.nics))
        if last is None:
            index = np.zeros(0, dtype=np.int64)
            delta = np.zeros(0, dtype=np.int64)
            interval = np.zeros(0)
        else:
            _, last_t, last_b = last
            index = np.flatnonzero((now >= last_b) & (sample.time_s > last_t))
            delta = now[index] - last_b[index]
            interval = sample.time_s - last_t[index]
        self._last_columns[id(sample.nics)] = (sample.nics, np.full(n, sample.time_s), now)
        rate = self.line_rate_bps
        with np.errstate(divide="ignore", invalid="ignore"):
            util = (
                np.where(interval > 0.0, delta * 8.0 / (interval * rate), 0.0)
                if rate > 0.0
                else np.zeros(len(index))
            )
        columns = NicColumns(sample.time_s, sample.nics, index, now[index], delta, interval, util)
        self.columns.append(columns)
        return columns

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


@dataclass(frozen=True, eq=False)
class PortColumns:
    """PortRow's columns for one PortSamples event (the rows of every port at one instant): the
    event's own readings, and each port's difference to its previous reading and utilization."""

    sample: PortSamples
    delta_bytes: np.ndarray
    interval_s: np.ndarray
    utilization: np.ndarray


class PortTable:
    """Rows of switch-port samples; default_line_rate_bps where a sample carries no rate.

    Samples come one port at a time (PortSample: `rows`) or every port at once (PortSamples:
    `columns`, the same values as arrays). A port is read one way or the other in a run."""

    def __init__(self, default_line_rate_bps: float) -> None:
        self.default_line_rate_bps = default_line_rate_bps
        self.rows: list[PortRow] = []
        self.columns: list[PortColumns] = []
        self._last: dict[tuple[str, str], tuple[float, int]] = {}
        # by the PortSamples' ports tuple: its last reading (time, tx_bytes)
        self._last_columns: dict[int, tuple[tuple[tuple[str, str], ...], float, np.ndarray]] = {}

    def add_columns(self, sample: PortSamples) -> PortColumns:
        """PortSamples as columns, with each port's difference to its previous reading and its
        utilization: what `add` computes per port, element by element (the same float
        operations, so the same values)."""
        tx = np.asarray(sample.tx_bytes, dtype=np.int64)
        n = len(sample.ports)
        delta = np.zeros(n, dtype=np.int64)
        interval = np.zeros(n)
        last = self._last_columns.get(id(sample.ports))
        if last is not None and sample.time_s > last[1]:
            grew = tx >= last[2]
            delta = np.where(grew, tx - last[2], 0)
            interval = np.where(grew, sample.time_s - last[1], 0.0)
        self._last_columns[id(sample.ports)] = (sample.ports, sample.time_s, tx)
        rate = np.asarray(sample.line_rate_bps, dtype=float)
        rate = np.where(rate > 0, rate, self.default_line_rate_bps)
        ok = (interval > 0.0) & (rate > 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(ok, delta * 8.0 / (interval * rate), 0.0)
        columns = PortColumns(sample, delta, interval, util)
        self.columns.append(columns)
        return columns

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
