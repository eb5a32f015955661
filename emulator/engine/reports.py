"""A worker's reports: the transport core's events, turned into the tuples the coordinator reads
(cheap to pickle) and into counters. A completed flow releases the flows here that wait for it;
the completion of a flow another worker waits for (a relay) is flushed at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from emulator.engine.ranks import RecvConn, SendConn
from emulator.transport.events import (
    CnpReceived,
    CnpSent,
    FlowCompleted,
    MessagePosted,
    MessageReceived,
    PacketDropped,
    RateChanged,
    Retransmitted,
    TransportEvent,
)


class EventReports:
    """Handling the core's events. Given the worker's report list (`out`, which the worker
    flushes), its named counters and drops, the queue pair tables, how late the worker is
    (TickState.lag_s) and what releases the flows waiting for a completion
    (FlowStarts.deps_done). Owns the relay set and whether a relay asks for a flush now.

    A completion's engine delay is the worker's lag or, when longer, how long the read that
    completed it waited in its socket (ReceivePath.data_wait_s / ack_wait_s, by QP)."""

    def __init__(
        self,
        events: list[TransportEvent],
        out: list[tuple[Any, ...]],
        counters: Counter[str],
        drops: Counter[str],
        send_conns: dict[int, SendConn],
        recv_conns: dict[int, RecvConn],
        lag_s: Callable[[], float],
        deps_done: Callable[[Sequence[int], float], None],
        send_done: Callable[[int], None],
        *,
        relay: Iterable[int],
        rate_sample_s: float,
        data_wait_s: dict[int, float] | None = None,
        ack_wait_s: dict[int, float] | None = None,
    ) -> None:
        self.events = events
        self.out = out
        self.counters = counters
        self.drops = drops
        self.send_conns = send_conns
        self.recv_conns = recv_conns
        self._lag_s = lag_s
        self._data_wait_s = data_wait_s if data_wait_s is not None else {}
        self._ack_wait_s = ack_wait_s if ack_wait_s is not None else {}
        self._deps_done = deps_done
        self._send_done = send_done  # a send queue pair's message completed (it may be idle)
        self.relay = set(relay)  # flow ids other workers wait for (the coordinator adds more)
        self.rate_sample_s = rate_sample_s
        self.flush_now = False  # a relay completed: the worker flushes its reports at once
        self._completed: list[tuple[int, float]] = []
        self._handlers = self._event_handlers()

    def _event_handlers(self) -> dict[type, Callable[[Any], None]]:
        """Each event type the core emits -> its handler (a type missing here is counted as
        unhandled)."""
        return {
            FlowCompleted: self._on_flow_completed,
            MessageReceived: self._on_message_received,
            RateChanged: self._on_rate_changed,
            CnpReceived: self._on_cnp_received,
            CnpSent: self._on_cnp_sent,
            Retransmitted: self._on_retransmitted,
            PacketDropped: self._on_packet_dropped,
            MessagePosted: _ignore,  # the engine reports the start itself, with the flow id
        }

    def handle_events(self) -> None:
        """Turn the core's events into reports (tuples) and counters; release dependents."""
        events = self.events
        if not events:
            return
        batch = events[:]
        events.clear()
        self._completed = []
        handlers = self._handlers
        for ev in batch:
            handler = handlers.get(type(ev))
            if handler is None:
                self.counters[f"unhandled_{type(ev).__name__}"] += 1
            else:
                handler(ev)
        if self._completed:
            self._deps_done([fid for fid, _ in self._completed], max(t for _, t in self._completed))

    def _on_flow_completed(self, ev: FlowCompleted) -> None:
        self._send_done(ev.qpn)
        conn = self.send_conns[ev.qpn]
        qp = conn.qp
        snap = (
            qp.packets_sent,
            qp.packets_retransmitted,
            conn.cnps_received,
            qp.pacing_lost_s + conn.nic_lost_s,
        )
        old = conn.snapshot
        conn.snapshot = snap
        self.out.append(
            (
                "done",
                ev.message_id,
                ev.completed_s,
                snap[0] - old[0],
                snap[1] - old[1],
                snap[2] - old[2],
                conn.conn_id,
                conn.ordinals.pop(ev.message_id, -1),
                # the last ACK was read this late (TickState.lag_s, or its wait in the socket)
                max(self._lag_s(), self._ack_wait_s.get(ev.qpn, 0.0)),
                snap[3] - old[3],  # pacing credit its QP or NIC lost while it was due
            )
        )
        self._completed.append((ev.message_id, ev.completed_s))
        if ev.message_id in self.relay:
            self.flush_now = True

    def _on_message_received(self, ev: MessageReceived) -> None:
        rx = self.recv_conns[ev.qpn]
        # CE as the message completed (the read may hold the next message's marks already);
        # CNPs by their own events, handled in order before this one
        snap = (ev.ce_packets, rx.cnps_sent, rx.qp.reordered_packets)
        old = rx.snapshot
        rx.snapshot = snap
        self.out.append(
            (
                "rx",
                rx.conn_id,
                ev.message_index,
                ev.now_s,
                ev.size_bytes,
                snap[0] - old[0],
                snap[1] - old[1],
                # the last byte was read (and its ACK sent) this late
                max(self._lag_s(), self._data_wait_s.get(ev.qpn, 0.0)),
                snap[2] - old[2],
            )
        )

    def _on_rate_changed(self, ev: RateChanged) -> None:
        conn = self.send_conns.get(ev.qpn)
        if conn is None:
            return
        # every cut is reported; increases at most once per rate_sample_s per QP
        if ev.reason == "cnp" or ev.now_s - conn.last_rate_sample_s >= self.rate_sample_s:
            conn.last_rate_sample_s = ev.now_s
            self.out.append(("rate", conn.rank.spec.rank, ev.qpn, ev.now_s, ev.current_rate_bps))

    def _on_cnp_received(self, ev: CnpReceived) -> None:
        conn = self.send_conns.get(ev.qpn)
        if conn is not None:
            conn.cnps_received += 1
        self.counters["cnps_received"] += 1

    def _on_cnp_sent(self, ev: CnpSent) -> None:
        conn = self.recv_conns.get(ev.qpn)
        if conn is not None:
            conn.cnps_sent += 1
        self.counters["cnps_sent"] += 1

    def _on_retransmitted(self, ev: Retransmitted) -> None:
        self.counters[f"go_back_n_{ev.reason}"] += 1
        self.counters["packets_resent_planned"] += ev.packets

    def _on_packet_dropped(self, ev: PacketDropped) -> None:
        self.drops[ev.reason] += 1


class FlushClock:
    """When a worker's periodic flush is due, and whether it carries the counters' report: the
    events every `event_batch_s` of wall time, the report every `stats_period_s` (with the first
    batch due after it). The counters' report sums over every queue pair and folds the drain's
    tallies: with every batch (50 a second) it was a twentieth of a busy worker's samples at TDF
    4600, for live metrics that a scrape reads once a second or so."""

    def __init__(self, event_batch_s: float, stats_period_s: float) -> None:
        self.event_batch_s = event_batch_s
        self.stats_period_s = stats_period_s
        self.next_flush_wall = 0.0
        self.next_stats_wall = 0.0

    def start(self, wall: float) -> None:
        """The run starts at `wall`: its first batch, with a report, one batch later."""
        self.next_flush_wall = self.next_stats_wall = wall + self.event_batch_s

    def due(self, wall: float) -> tuple[bool, bool]:
        """(flush now, with the report) at `wall`; a due flush is counted as done."""
        if wall < self.next_flush_wall:
            return False, False
        self.next_flush_wall = wall + self.event_batch_s
        if wall < self.next_stats_wall:
            return True, False
        self.next_stats_wall = wall + self.stats_period_s
        return True, True


def _ignore(event: object) -> None:
    del event
