"""RunRecorder: the one object the run feeds with events; it keeps the records and the tables for
the results folder and moves the live counters the Prometheus exporter reads.

Events are dispatched by type through a registry (HANDLERS). Per-flow congestion counts arrive
cumulative (FlowProgress, FlowFinished); the recorder credits only the increase since the last
event of that flow, so live totals are exact whether or not the engine sends progress events.
Counts are credited to the rank where they happen: packets and retransmissions to the sender,
CE marks and CNPs sent to the receiver (the notification point), CNPs received to the sender.
The live per-iteration collective gauges are published when a collective's last flow finishes;
the records (and the summary) also take CollectiveMemberFinished events arriving later into
account.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from collectors.attribution import AttributionTable
from collectors.live import LiveMetrics, RunInfo
from collectors.records import CollectiveMeta, FlowMeta, RecordBuilder
from collectors.samples import CpuRow, NicTable, PortTable
from collectors.tables import RunTables
from emulator.events import (
    CollectiveMemberFinished,
    CollectiveMemberStarted,
    CpuSample,
    FlowFinished,
    FlowProgress,
    FlowStarted,
    NicSample,
    NicSamples,
    PortAttribution,
    PortClassSample,
    PortSample,
    PortSamples,
    RateSample,
    RunEvent,
)

_ZERO = (0, 0, 0, 0, 0)
# Index in the counts tuple -> credited to the flow's sender (True) or receiver (False).
_AT_SENDER = (True, True, False, False, True)


class RunRecorder:
    def __init__(
        self,
        flows: Iterable[FlowMeta],
        collectives: Iterable[CollectiveMeta],
        info: RunInfo,
        nic_line_rate_bps: float,
        port_line_rate_bps: float | None = None,
        live: LiveMetrics | None = None,
    ) -> None:
        self.info = info
        self.builder = RecordBuilder(flows, collectives)
        self.nic = NicTable(nic_line_rate_bps)
        self.ports = PortTable(port_line_rate_bps or nic_line_rate_bps)
        self.live = live if live is not None else LiveMetrics(info)
        self._credited: dict[int, tuple[int, ...]] = {}
        self._port_prev: dict[tuple[str, str], tuple[int, int, int, int]] = {}
        self._pause_prev: dict[tuple[str, str], tuple[float, float]] = {}
        # PortSamples, by its ports tuple: the previous counters and pauses, and the totals
        self._columns_prev: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._columns_totals: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.cpu_rows: list[CpuRow] = []
        self.attribution = AttributionTable()

    def add_plan(self, flows: Iterable[FlowMeta], collectives: Iterable[CollectiveMeta]) -> None:
        """Register collectives (and their flows) learnt during the run."""
        with self.live.lock:
            self.builder.add(flows, collectives)

    def on_event(self, event: RunEvent) -> None:
        self.on_events((event,))

    def on_events(self, events: Iterable[RunEvent]) -> None:
        """Record a batch; the live lock is taken once per batch, not per event."""
        with self.live.lock:
            for event in events:
                handler = HANDLERS.get(type(event))
                if handler is None:
                    raise TypeError(f"the recorder has no handler for {type(event).__name__}")
                handler(self, event)
                self.live.advance(event.time_s)

    def tables(self) -> RunTables:
        """Everything recorded so far, as the results folder's tables (also mid-run, for a
        checkpoint or an interrupted run)."""
        with self.live.lock:
            return RunTables.from_rows(
                self.builder.flow_records(),
                self.builder.collective_records(),
                list(self.nic.rows),
                list(self.ports.rows),
                list(self.cpu_rows),
                nic_columns=list(self.nic.columns),
                port_columns=list(self.ports.columns),
                attribution=self.attribution.row_columns,
                marks=self.attribution.mark_columns,
                attribution_measured=self.attribution.measured,
            )

    # Handlers run with the live lock held.

    def _flow_started(self, event: FlowStarted) -> None:
        self.builder.flow_started(event)
        self.live.flows_started[self.builder.flows[event.flow_id].collective_type] += 1

    def _credit(self, event: FlowProgress | FlowFinished) -> None:
        meta = self.builder.flows[event.flow_id]
        counts = (
            event.packets,
            event.retransmitted_packets,
            event.ce_marks,
            event.cnps_sent,
            event.cnps_received,
        )
        before = self._credited.get(event.flow_id, _ZERO)
        for index, (now, then) in enumerate(zip(counts, before, strict=True)):
            rank = meta.src_rank if _AT_SENDER[index] else meta.dst_rank
            self.live.add_congestion(rank, meta.collective_type, index, now - then)
        self._credited[event.flow_id] = tuple(
            max(a, b) for a, b in zip(counts, before, strict=True)
        )

    def _flow_progress(self, event: FlowProgress) -> None:
        self.builder.flow_progress(event)
        self._credit(event)

    def _flow_finished(self, event: FlowFinished) -> None:
        meta = self.builder.flows[event.flow_id]
        completed = self.builder.flow_finished(event)
        self._credit(event)
        self._credited.pop(event.flow_id, None)
        record = self.builder.flow_record(event.flow_id)
        live = self.live
        live.flows_completed[meta.collective_type] += 1
        live.flow_bytes_completed[meta.collective_type] += meta.bytes
        if record.fct_s is not None:
            live.fct[meta.collective_type].observe(record.fct_s)
        if completed is not None:
            self._collective_completed(completed)

    def _collective_completed(self, collective_id: int) -> None:
        record = self.builder.collective_record(collective_id)
        if record.completion_time_s is None:
            return
        self.live.collective_completed(
            record.collective_type,
            record.iteration,
            record.completion_time_s,
            record.busbw_bytes_per_s,
            record.ideal_busbw_bytes_per_s,
        )

    def _member_started(self, event: CollectiveMemberStarted) -> None:
        self.builder.member_started(event)

    def _member_finished(self, event: CollectiveMemberFinished) -> None:
        self.builder.member_finished(event)

    def _rate(self, event: RateSample) -> None:
        self.live.qp_rate_bps[(event.rank, event.qp)] = event.rate_bps

    def _nic(self, event: NicSample) -> None:
        row = self.nic.add(event)
        if row is not None:
            key = (row.rank, row.direction)
            self.live.nic_bytes[key] += row.delta_bytes
            self.live.nic_utilization[key] = row.utilization

    def _nics(self, event: NicSamples) -> None:
        """_nic's work for every NIC counter at once."""
        columns = self.nic.add_columns(event)
        if not len(columns.index):
            return
        keys = [event.nics[i] for i in columns.index.tolist()]
        live = self.live
        for key, delta, util in zip(
            keys, columns.delta_bytes.tolist(), columns.utilization.tolist(), strict=True
        ):
            live.nic_bytes[key] += delta
            live.nic_utilization[key] = util

    def _port(self, event: PortSample) -> None:
        row = self.ports.add(event)
        key = (row.switch, row.port)
        now = (row.tx_bytes, row.tx_packets, row.ecn_marks, row.drops)
        prev = self._port_prev.get(key)
        if prev is not None:
            totals = self.live.port_totals[key]
            for i, (value, then) in enumerate(zip(now, prev, strict=True)):
                # A counter that went backwards was reset: its new value is what it counted since.
                totals[i] += value - then if value >= then else value
        else:
            self.live.port_totals.setdefault(key, [0, 0, 0, 0])
        self._port_prev[key] = now
        if row.pause_s is not None and row.pause_events is not None:
            pause_now = (float(row.pause_s), float(row.pause_events))
            pause_prev = self._pause_prev.get(key)
            pause = self.live.port_pause[key]
            if pause_prev is not None:
                for i, (cur, old) in enumerate(zip(pause_now, pause_prev, strict=True)):
                    # a counter that went backwards was reset: its value is what it counted since
                    pause[i] += cur - old if cur >= old else cur
            self._pause_prev[key] = pause_now
        self.live.port_queue_bytes[key] = row.queue_bytes
        self.live.port_utilization[key] = row.utilization

    def _ports(self, event: PortSamples) -> None:
        """_port's work for every port at once: the same totals, pauses, queue and utilization
        (numpy over the ports; the live dictionaries updated in one call each)."""
        columns = self.ports.add_columns(event)
        key, n = id(event.ports), len(event.ports)
        now = np.stack([event.tx_bytes, event.tx_packets, event.ecn_marks, event.drops], axis=1)
        pause_now = None
        if event.pause_s is not None and event.pause_events is not None:
            pause_now = np.stack([event.pause_s, event.pause_events.astype(float)], axis=1)
        prev = self._columns_prev.get(key)
        totals, pauses = self._columns_totals.setdefault(
            key, (np.zeros((n, 4), dtype=np.int64), np.zeros((n, 2)))
        )
        if prev is not None:
            # a counter that went backwards was reset: its new value is what it counted since
            totals += np.where(now >= prev[0], now - prev[0], now)
            if pause_now is not None and prev[1] is not None:
                pauses += np.where(pause_now >= prev[1], pause_now - prev[1], pause_now)
        self._columns_prev[key] = (now, pause_now)
        live = self.live
        live.port_totals.update(zip(event.ports, totals.tolist(), strict=True))
        if pause_now is not None:
            live.port_pause.update(zip(event.ports, pauses.tolist(), strict=True))
        live.port_queue_bytes.update(zip(event.ports, event.queue_bytes.tolist(), strict=True))
        live.port_utilization.update(zip(event.ports, columns.utilization.tolist(), strict=True))

    def _attribution(self, event: PortAttribution) -> None:
        collectives, flows = self.builder.collectives, self.builder.flows

        def type_of(instance: int) -> str:
            meta = collectives.get(instance)
            return meta.collective_type if meta is not None else "UNKNOWN"

        def instance_of(flow_id: int) -> int:
            meta = flows.get(flow_id)
            return meta.collective_id if meta is not None else -1

        def job_of(instance: int) -> str:
            meta = collectives.get(instance)
            return meta.job if meta is not None else ""

        self.live.add_attribution(self.attribution.add(event, type_of, instance_of, job_of))

    def _class_sample(self, event: PortClassSample) -> None:
        self.live.add_attribution(self.attribution.add_classes(event))

    def _cpu(self, event: CpuSample) -> None:
        self.cpu_rows.append(CpuRow(event.time_s, event.busy_ratio, event.server))
        if event.server:
            self.live.cpu_busy_by_server[event.server] = event.busy_ratio
        else:
            self.live.cpu_busy_ratio = event.busy_ratio


def _handlers() -> dict[type, Callable[[RunRecorder, Any], None]]:
    return {
        FlowStarted: RunRecorder._flow_started,
        FlowProgress: RunRecorder._flow_progress,
        FlowFinished: RunRecorder._flow_finished,
        CollectiveMemberStarted: RunRecorder._member_started,
        CollectiveMemberFinished: RunRecorder._member_finished,
        RateSample: RunRecorder._rate,
        NicSample: RunRecorder._nic,
        NicSamples: RunRecorder._nics,
        PortSample: RunRecorder._port,
        PortSamples: RunRecorder._ports,
        PortAttribution: RunRecorder._attribution,
        PortClassSample: RunRecorder._class_sample,
        CpuSample: RunRecorder._cpu,
    }


HANDLERS = _handlers()
