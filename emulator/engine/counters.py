"""What a worker counts and measures, and the stats it reports every engine.stats_period_s.

Per traffic class (DSCP) the packets and bytes its ranks sent and received; the one-way latency
of data packets from the departure stamps the sender wrote into them (per QP and per class,
target seconds); its NICs' pacing; its CPU time, tick lateness and GC pauses; and, once at the
end, each queue pair's counters. (The NICs' byte counters are the interfaces' own, which the
run's sampler reads.)
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from emulator.engine.ranks import Rank, RecvConn, SendConn
from emulator.engine.tick_state import TickState
from emulator.engine.xdp_ports import XdpNic
from emulator.latency import LatencyHistogram
from emulator.transport.burst_wire import departed_ns
from emulator.transport.qp_counters import recv_qp_counters, send_qp_counters


class CountClass(Protocol):
    """Counters.count_class, as the send and receive paths are given it."""

    def __call__(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None: ...


class Counters:
    """A worker's counting and measuring, and its reports of them. Given the ranks and their
    AF_XDP ports, the queue pair tables, the worker's named counters and drops (which the
    other parts count into) and its tick state (what delayed the ticks)."""

    def __init__(
        self,
        ranks: dict[int, Rank],
        xdp_nics: list[XdpNic],
        send_conns: dict[int, SendConn],
        recv_conns: dict[int, RecvConn],
        counters: Counter[str],
        drops: Counter[str],
        ticks: TickState,
        tdf: float,
    ) -> None:
        self.ranks = ranks
        self.xdp_nics = xdp_nics
        self.send_conns = send_conns
        self.recv_conns = recv_conns
        self.counters = counters
        self.drops = drops
        self.ticks = ticks
        self.tdf = tdf
        self._target_s_per_ns = 1e-9 / tdf
        # per traffic class (DSCP): [packets sent, bytes sent, packets received, bytes received]
        self.classes: dict[int, list[int]] = {}
        # one-way latency per traffic class as received (DSCP), target seconds
        self.latency_classes: dict[int, LatencyHistogram] = {}
        # wall seconds from a completion elsewhere to the flows it released arriving here
        self.dep_latency: dict[str, LatencyHistogram] = {}
        # wall seconds each read's data waited in its socket (kernel stamp to the read)
        self.receive_wait = LatencyHistogram()
        # called first by every report: what is counted elsewhere until read (the receive
        # path's drain counts in C), folded into these counters
        self.collectors: list[Callable[[], None]] = []
        self._cpu_at_start_s: float | None = None  # None: the run has not started

    def run_started(self) -> None:
        """The run starts now: its CPU time counts from here (run_cpu_s)."""
        self._cpu_at_start_s = cpu_s()

    def dependency_arrived(self, now: float, completed_s: float, label: str) -> None:
        """Flows released by a completion at target time `completed_s` arrived here at `now`:
        how long (wall seconds) that took, by the label the coordinator gave."""
        h = self.dep_latency.get(label)
        if h is None:
            h = self.dep_latency[label] = LatencyHistogram()
        h.observe(max(now - completed_s, 0.0) * self.tdf)

    def count_class(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
        """Per-DSCP tally of what this worker's ranks sent or received (UDP payload bytes)."""
        row = self.classes.get(tos >> 2)
        if row is None:
            row = self.classes[tos >> 2] = [0, 0, 0, 0]
        at = 0 if sent else 2
        row[at] += packets
        row[at + 1] += udp_bytes

    def observe(
        self, qpn: int, tos: int, data: bytearray | memoryview, nbytes: int, psn: int, rx_ns: int
    ) -> None:
        """The one-way latency of the first data segment of one read. The kernel stamps a GRO
        batch once, with its first segment's arrival: that segment's latency is exact, the
        others' would be read against the wrong arrival, so one segment per read is measured
        (every packet when they arrive one per read; a sample of them under load)."""
        conn = self.recv_conns.get(qpn)
        if conn is None:
            return
        departed = departed_ns(data, nbytes, psn)
        if not departed:
            return
        # a stamp from the future (a clock step) counts as 0, not as a negative latency
        latency_s = max(rx_ns - departed, 0) * self._target_s_per_ns
        if conn.latency is None:
            conn.latency = LatencyHistogram()
        conn.latency.observe(latency_s)
        by_class = self.latency_classes.get(tos >> 2)
        if by_class is None:
            by_class = self.latency_classes[tos >> 2] = LatencyHistogram()
        by_class.observe(latency_s)

    def report(self, now: float) -> dict[str, Any]:
        """The stats a batch of events goes to the coordinator with."""
        self._collect()
        # one getrusage for the CPU and the memory (three took 2-3% of a busy worker's samples)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime
        return {
            "time_s": now,
            "drops": dict(self.drops),  # every drop is a PacketDropped event, counted once
            "counters": dict(self.counters),
            "classes": {dscp: list(row) for dscp, row in self.classes.items()},
            "cpu_s": cpu,
            "max_rss_kb": usage.ru_maxrss,
            "run_cpu_s": 0.0 if self._cpu_at_start_s is None else cpu - self._cpu_at_start_s,
            "max_tick_gap_s": self.ticks.max_tick_gap_s,
            "tick_lateness": self.ticks.lateness.to_json(),  # wall seconds
            "gc_pauses": self.ticks.gc_pauses.to_json(),  # wall seconds
            "pacing": self._pacing(),
            "latency": {dscp: h.to_wire() for dscp, h in self.latency_classes.items()},
            "dep_latency": {label: h.to_wire() for label, h in self.dep_latency.items()},
            "receive_wait": self.receive_wait.to_wire(),
            # each AF_XDP port's info and counters (engine.send_path af_xdp)
            **({"af_xdp": [nic.report() for nic in self.xdp_nics]} if self.xdp_nics else {}),
        }

    def _collect(self) -> None:
        for collect in self.collectors:
            collect()

    def _pacing(self) -> dict[str, float]:
        """Bytes sent and bytes the rates allowed but the ticks came too late for (the NICs'
        when line-rate bound, else their queue pairs'), summed over the worker's NICs."""
        nics = {id(r.nic): r.nic for r in self.ranks.values()}.values()
        lost = sum(n.lost_wire_bytes for n in nics)
        lost += sum(c.qp.pacing_lost_bytes for c in self.send_conns.values())
        return {"sent_bytes": float(sum(n.sent_wire_bytes for n in nics)), "lost_bytes": lost}

    def queue_pairs(self) -> dict[str, Any]:
        """The tester's per-QP counters, each half where it lives (sent once, at the end: a
        run may have thousands of QPs). Rows are lists in the order of SEND_QP_COLUMNS and
        RECV_QP_COLUMNS, by QP number."""
        self._collect()
        return {
            "send_qps": {
                qpn: send_qp_counters(c.qp, c.cnps_received, c.tos >> 2)
                for qpn, c in self.send_conns.items()
                if not c.ahead or c.next_ordinal  # opened ahead and never used: not a row
            },
            "recv_qps": {
                qpn: recv_qp_counters(c.qp, c.cnps_sent)
                for qpn, c in self.recv_conns.items()
                if not c.ahead or c.qp.packets_received
            },
            "qp_latency": {
                qpn: c.latency.to_wire()
                for qpn, c in self.recv_conns.items()
                if c.latency is not None
            },
        }


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
