"""One worker process: a uvloop loop driving the transport core for a shard of ranks.

Per rank: a RoceEndpoint (its queue pairs), a socket bound to ADDRESS:4791 that receives every
RoCEv2 packet for the rank, and one socket per UDP source port its queue pairs use (RoCEv2 sends
to port 4791 both ways; the source port is the QP's entropy, so ACKs and CNPs go back on the
reversed 5-tuple from the receiver's socket bound to the same source port). Receive queue pairs
are created when a QP's first packet arrives, from the packet's source address and port, so a
receiver needs no plan. Received ICRCs are not checked: a UDP socket does not see the IP id and
length they cover (tests/system/test_engine_wire.py checks them on a capture of the wire).

Each tick (`tick_s` of wall time) runs the core's timers, starts flows whose dependencies and
start delays are over, and sends what every queue pair's pacer released, as GSO batches. Reads
happen whenever a receive socket is readable. Events go to the coordinator in batches as tuples
(cheap to pickle); coordinator messages come in on the same pipe.

The data path works a GSO buffer at a time, not a packet at a time: queue pairs hand out compact
Bursts (`SendQueuePair.poll_burst`) that `BurstWriter` lays out with every ICRC in a few numpy
operations, or that emulator/native's C code lays out and sends in one call (the native path,
when built and self-checked: emulator/engine/native_path.py); a GRO read of data for one QP goes
to `ReceiveQueuePair.on_data_run` in one call, a read of ACKs to `SendQueuePair.on_acks`, and
the ACKs one read produces leave as one GSO send.
Anything else (CE marks, gaps, NAKs, unknown QPs) goes packet by packet through the codec.

With `engine.send_path: af_xdp` the ranks of each interface share an AF_XDP port instead of
sockets (xdp_ports.py), which sends their bursts and replies, hands over what arrives as runs
read like GRO reads, and is paced by the worker between ticks (xdp_path.py).

A Worker is one class put together from a part per job, each a mixin in its own module that uses
the fields set in Worker.__init__: ranks.py (the rank sockets), flows.py (the flows' queue pairs
and when flows start), send_path.py, receive_path.py, xdp_path.py (the AF_XDP ports' sends,
reads and pacing), reports.py (events into reports) and counters.py (counters, latency stamps,
stats). This module is the worker process: construction,
the tick, the protocol on the coordinator's pipe, and the entry point. Mixins, not objects the
worker calls through, so the per-packet paths cost what they cost in one class.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from emulator.engine.af_xdp_setup import AfXdpUnavailable
from emulator.engine.clock import DilatedClock
from emulator.engine.counters import Counters, cpu_s
from emulator.engine.flows import FlowStarts
from emulator.engine.gcpause import GcPauses
from emulator.engine.lateness import TickLateness
from emulator.engine.native_path import NATIVE_BUFFERS_PER_POLL, choose_data_path
from emulator.engine.params import EngineParams
from emulator.engine.plan import DEFAULT_PROFILE, EngineFlow, QpProfile, RankEndpoint
from emulator.engine.ranks import RECV_BUFFER_BYTES, Rank, RankSockets, RecvConn, SendConn
from emulator.engine.receive_path import ReceivePath
from emulator.engine.reports import EventReports
from emulator.engine.send_path import SendPath
from emulator.engine.sockets import Offloads, detect_offloads
from emulator.engine.xdp_path import XdpPath
from emulator.engine.xdp_ports import PortGroup, XdpNic
from emulator.errors import EmulatorError
from emulator.latency import LatencyHistogram
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.events import TransportEvent
from emulator.transport.packets import BTH_BYTES, ICRC_BYTES
from emulator.transport.params import TransportParams
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, IPV4_FRAME_OVERHEAD_BYTES
from emulator.transport.wire import ECN_NOT_ECT

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, picklable (it crosses into a spawned process)."""

    index: int
    ranks: tuple[RankEndpoint, ...]
    addresses: dict[int, str]  # every rank's address (destinations)
    flows: tuple[EngineFlow, ...]  # flows whose src rank is in this shard
    connections: dict[tuple[int, int, int, int], int]  # EngineFlow.connection_key -> conn id
    transport: TransportParams
    engine: EngineParams
    profiles: tuple[QpProfile, ...] = (DEFAULT_PROFILE,)  # EngineFlow.profile -> how its QP sends
    relay: frozenset[int] = frozenset()  # flow ids other workers wait for: report at once


class Worker(FlowStarts, EventReports, ReceivePath, SendPath, XdpPath, Counters, RankSockets):
    """A shard of ranks on one uvloop loop. Its parts share the fields set here and call each
    other as methods of this one object (no indirection on the per-packet paths)."""

    def __init__(self, spec: WorkerSpec, pipe: Connection) -> None:
        self.spec = spec
        self.rank_addresses = frozenset(spec.addresses.values())
        self.pipe = pipe
        p = spec.engine
        self.params = p
        self.transport = spec.transport
        self.offloads: Offloads = detect_offloads(p.gso, p.gro)
        self.events: list[TransportEvent] = []
        self.out: list[tuple[Any, ...]] = []
        self.drops: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.ranks: dict[int, Rank] = {}
        self.send_conns: dict[int, SendConn] = {}  # by qpn
        self.recv_conns: dict[int, RecvConn] = {}  # by qpn
        self.active: dict[int, SendConn] = {}
        self.flows: dict[int, EngineFlow] = {}
        self.connections: dict[tuple[int, int, int, int], int] = {}
        self.waiting: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = {}
        self.done_flows: set[int] = set()
        self.delayed: list[tuple[float, int]] = []
        self.clock = DilatedClock(p.tdf)
        self.buf = bytearray(RECV_BUFFER_BYTES)
        self.latency = p.one_way_latency
        # room for the native path's sends of several GSO buffers at once (send_path.py)
        self.gso_buf = BurstBuffer(
            max(RECV_BUFFER_BYTES, NATIVE_BUFFERS_PER_POLL * GSO_MAX_BUFFER_BYTES),
            stamps=self.latency,
        )
        # the native burst path when it is built and passes its self-check (engine.native)
        self.reply_buf = bytearray(RECV_BUFFER_BYTES)
        self.data_path = choose_data_path(
            p.native, self.gso_buf, self.buf, self.reply_buf, p.gso_max_segments
        )
        self.native = self.data_path.bursts
        self.run_reader = self.data_path.reader
        self.native_replies = self.data_path.replies
        self._native_ack_flows = {}
        if self.native is not None:
            self._buffers_per_poll = NATIVE_BUFFERS_PER_POLL
        self._native_flows = {}
        # one-way latency per traffic class as received (DSCP), target seconds
        self.latency_classes: dict[int, LatencyHistogram] = {}
        # wall seconds from a completion elsewhere to the flows it released arriving here
        self.dep_latency: dict[str, LatencyHistogram] = {}
        self._target_s_per_ns = 1e-9 / p.tdf
        self.gso_view = memoryview(self.gso_buf.data)
        self._gso_cmsgs: dict[tuple[int, int], list[tuple[int, int, bytes]]] = {}
        self.relay = set(spec.relay)
        self._completed: list[tuple[int, float]] = []
        self._handlers = self._event_handlers()
        self.flush_now = False
        self.started = False
        self._last_tick_wall = 0.0
        self._cpu_at_start_s = 0.0
        self.max_tick_gap_s = 0.0
        self.tick_lateness = TickLateness()
        self.gc_pauses = GcPauses()
        self._burst_s = p.burst_ticks * p.tick_s / p.tdf
        self._max_packet_wire_bytes = (
            BTH_BYTES + spec.transport.path_mtu_bytes + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.finished: asyncio.Future[None] | None = None
        t = spec.transport
        # sockets default to the data class; a QP in another class (qp_dscp) says so per send
        self.tos_data = t.dscp << 2 | t.data_ecn_bits
        self.tos_ack = t.ack_dscp_value << 2 | ECN_NOT_ECT
        self.tos_cnp = t.cnp_dscp << 2 | ECN_NOT_ECT
        # per traffic class (DSCP): [packets sent, bytes sent, packets received, bytes received]
        self.classes: dict[int, list[int]] = {}
        self._profile_params: dict[int, TransportParams] = {}
        self._nic_sent: dict[int, tuple[int, int]] = {}  # NIC counters as last reported
        self._tick_handle: asyncio.Handle | None = None
        # the AF_XDP ports (engine.send_path af_xdp), opened by _open_ranks
        self.xdp_nics: list[XdpNic] = []
        self.xdp_group: PortGroup | None = None
        self.xdp_recorded: bool | None = None
        self._open_ranks()
        self._xdp_lead_s = p.tick_s / p.tdf if self.xdp_nics else 0.0
        self._add_flows(spec.flows, spec.connections)

    # -- the tick -------------------------------------------------------------------------
    def _start(self) -> None:
        self.started = True
        self._cpu_at_start_s = cpu_s()
        now = self.clock.now()
        for f in self.flows.values():
            if self.waiting.get(f.id) == 0:
                self._ready(f, max(now, 0.0))
        self._next_tick_wall = time.perf_counter()
        self._next_flush_wall = self._next_tick_wall + self.params.event_batch_s
        self._tick()

    def _tick(self) -> None:
        assert self.loop is not None
        if self.finished is None or self.finished.done():
            return
        now = self.clock.now()
        start_wall = time.perf_counter()
        if self._last_tick_wall:
            self.max_tick_gap_s = max(self.max_tick_gap_s, start_wall - self._last_tick_wall)
            self.tick_lateness.add(max(start_wall - self._next_tick_wall, 0.0))
        self._last_tick_wall = start_wall
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            _, fid = heapq.heappop(delayed)
            self._post(self.flows[fid], now)
        for conn in list(self.active.values()):
            deadline = conn.qp.next_timer_s()
            if deadline is not None and deadline <= now:
                conn.qp.on_timer(now=now)
        # A tick that fires late (uvloop timers round to 1 ms) gets the credit the on-time
        # tick would have had: its bucket is deeper by the lateness, at most one tick.
        tick = self.params.tick_s
        late_s = min(max(start_wall - self._next_tick_wall, 0.0), tick)
        self._pump(now + self._xdp_lead_s, late_s / self.params.tdf)
        self._handle_events()
        wall = time.perf_counter()
        if self.flush_now or wall >= self._next_flush_wall:
            self._flush(now)
            self._next_flush_wall = wall + self.params.event_batch_s
        self._next_tick_wall += tick
        if self._next_tick_wall < wall:
            self._next_tick_wall = wall + tick  # fell behind: do not try to catch up in a burst
        self._tick_handle = self.loop.call_later(self._next_tick_wall - wall, self._tick)
        if self.xdp_group is not None:
            self._pace_xdp()  # the ports' backlogs until the next tick (xdp_path.py)

    def _lag_s(self) -> float:
        """How far behind its schedule this worker is now, in wall seconds: how overdue its
        next tick is. A read handled now was handled about that late (the loop was busy, or
        not given a CPU), and the times the protocol stamps at it carry that much of the
        machine; 0 while the loop keeps its schedule."""
        if not self.started:
            return 0.0
        return max(time.perf_counter() - self._next_tick_wall, 0.0)

    def _flush(self, now: float) -> None:
        self.flush_now = False
        out, self.out = self.out, []
        self.pipe.send(("events", out, self._stats(now)))

    # -- commands -------------------------------------------------------------------------
    def _on_command(self) -> None:
        assert self.loop is not None and self.finished is not None
        while self.pipe.poll():
            try:
                msg = self.pipe.recv()
            except EOFError:
                self._stop()
                return
            kind = msg[0]
            if kind == "go":
                delay = msg[1] - time.perf_counter()
                self.clock = DilatedClock(self.params.tdf, msg[1])
                self.loop.call_later(max(delay, 0.0), self._start)
            elif kind == "deps_done":
                self._deps_done(msg[1], self.clock.now())
                self._pump(self.clock.now())
            elif kind == "flows":
                # flows handed out at run time: the coordinator waits for each completion
                if len(msg) > 3:  # released by a completion at target time msg[3]
                    self._dependency_arrived(msg[3], msg[4])
                self.relay.update(f.id for f in msg[1])
                self._add_flows(msg[1], msg[2])
                if self.started:
                    self._pump(self.clock.now())
            elif kind == "stop":
                self._stop()
                return

    def _dependency_arrived(self, completed_s: float, label: str) -> None:
        """How long (wall) the completion that released these flows took to reach this worker."""
        h = self.dep_latency.get(label)
        if h is None:
            h = self.dep_latency[label] = LatencyHistogram()
        h.observe(max(self.clock.now() - completed_s, 0.0) * self.params.tdf)

    def _stop(self) -> None:
        assert self.finished is not None
        if not self.finished.done():
            self.finished.set_result(None)

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """A callback raised: the worker cannot go on half-working, so it fails (the coordinator
        then fails the run with the message)."""
        del loop
        exc = context.get("exception")
        failure = exc if isinstance(exc, BaseException) else RuntimeError(context.get("message"))
        if self.finished is not None and not self.finished.done():
            self.finished.set_exception(failure)

    def run(self) -> None:
        import uvloop

        loop = uvloop.new_event_loop()
        asyncio.set_event_loop(loop)
        self.loop = loop
        self.finished = loop.create_future()
        loop.set_exception_handler(self._on_loop_error)
        loop.add_reader(self.pipe.fileno(), self._on_command)
        # uvloop made the pipe non-blocking: a send into a full pipe (a big batch of events
        # while the coordinator is busy) would raise mid-message and break its framing.
        # Blocking, a send waits for the coordinator to read (it reads only what poll() says
        # is there, so receiving never blocks the loop).
        os.set_blocking(self.pipe.fileno(), True)
        for rank in self.ranks.values():
            if rank.rx_sock is not None:
                loop.add_reader(rank.rx_sock.fileno(), self._on_readable, rank)
        for nic in self.xdp_nics:
            for fd in nic.port.fds:
                loop.add_reader(fd, self._on_xdp_readable, nic)
        self.pipe.send(
            (
                "ready",
                {
                    "pid": os.getpid(),
                    "gso": self.offloads.gso,
                    "gro": self.offloads.gro,
                    "data_path": self.data_path.to_json(),
                    "send_path": self.params.send_path,
                    # the ports' ledger entries were recorded (False: nobody held a ledger)
                    **({"xdp_recorded": self.xdp_recorded} if self.xdp_nics else {}),
                },
            )
        )
        try:
            loop.run_until_complete(self.finished)
            now = self.clock.now()
            self._handle_events()
            self.pipe.send(("bye", self.out, {**self._stats(now), **self._queue_pairs()}))
        finally:
            loop.close()
            self.close()


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_main(spec: WorkerSpec, pipe: Connection) -> None:
    """Process entry point: never outlive the coordinator; report failures on the pipe."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    if os.getppid() == 1:
        sys.exit(1)
    worker: Worker | None = None
    try:
        worker = Worker(spec, pipe)
        worker.run()
    except AfXdpUnavailable as e:
        _report(pipe, str(e), kind="refused")  # the run refuses at start, in this one line
        sys.exit(1)
    except EmulatorError as e:
        _report(pipe, f"worker {spec.index}: {e}")
        sys.exit(1)
    except Exception as e:
        import traceback

        _report(
            pipe, f"worker {spec.index} crashed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        )
        sys.exit(1)
    finally:
        if worker is not None:
            worker.close()


def _report(pipe: Connection, message: str, kind: str = "error") -> None:
    with contextlib.suppress(OSError):
        pipe.send((kind, message))
