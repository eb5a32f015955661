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

A Worker is one object composed of parts, each a class in its own module that owns its state
and is given, when the worker builds it, only the collaborators it uses: RankSockets (ranks.py:
the ranks, their sockets and AF_XDP ports), FlowStarts (flows.py: the flows, their send queue
pairs and when they start), SendPath (send_path.py), ReceivePath (receive_path.py), XdpSender
and XdpPacer (xdp_path.py: the AF_XDP ports' sends, reads and pacing), EventReports (reports.py:
events into reports) and Counters (counters.py: counters, latency stamps, stats). What several
parts share is made here and handed to each: the core's event list, the report list, the
named counters, the queue pair tables by QP number, the buffers, and the tick state
(tick_state.py: the clock, whether the run started, when the next tick is due). A part calls
another through a bound method it stored at construction, which costs what a method call on
one object does, and binds what a per-packet loop needs to locals, as before. This module is
the worker process: building the parts, the tick, the protocol on the coordinator's pipe, and
the entry point (WorkerSpec, what a worker is given, is worker_spec.py's).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any

from emulator.engine.active import ActiveQueuePairs
from emulator.engine.af_xdp_setup import AfXdpUnavailable
from emulator.engine.counters import Counters
from emulator.engine.flows import FlowStarts
from emulator.engine.native_path import NATIVE_BUFFERS_PER_POLL, choose_data_path
from emulator.engine.ranks import RECV_BUFFER_BYTES, Rank, RankSockets, RecvConn, SendConn
from emulator.engine.receive_path import ReceivePath
from emulator.engine.reports import EventReports, FlushClock
from emulator.engine.send_errors import SendFailures
from emulator.engine.send_path import SendPath
from emulator.engine.sockets import Offloads, detect_offloads
from emulator.engine.tick_state import TickState
from emulator.engine.worker_spec import WorkerSpec
from emulator.engine.xdp_path import XdpPacer, XdpSender
from emulator.errors import EmulatorError
from emulator.native.drain import ReceiveDrain
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.events import TransportEvent
from emulator.transport.packets import BTH_BYTES, ICRC_BYTES
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, IPV4_FRAME_OVERHEAD_BYTES

PR_SET_PDEATHSIG = 1  # include/uapi/linux/prctl.h

__all__ = ["Worker", "WorkerSpec", "worker_main"]  # WorkerSpec: importable from here as before


class Worker:
    """A shard of ranks on one uvloop loop: builds its parts (the module docstring), runs the
    tick and talks to the coordinator."""

    def __init__(self, spec: WorkerSpec, pipe: Connection) -> None:
        self.spec = spec
        self.pipe = pipe
        p = spec.engine
        self.params = p
        t = spec.transport
        self.offloads: Offloads = detect_offloads(p.gso, p.gro)
        # shared by the parts: the core's events, the reports the coordinator gets, counters
        self.events: list[TransportEvent] = []
        self.out: list[tuple[Any, ...]] = []
        self.drops: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        # the queue pairs by QP number: the flows open the send ones, the receive path the
        # receive ones (as a QP's first packet arrives); `active` are the send ones with
        # something posted, which the send path serves until they go idle
        self.send_conns: dict[int, SendConn] = {}
        self.recv_conns: dict[int, RecvConn] = {}
        self.active = ActiveQueuePairs()
        # the receive buffer, the one bursts are laid out in (room for the native path's sends
        # of several GSO buffers at once: send_path.py) and the one ACKs are laid out in
        buf = bytearray(RECV_BUFFER_BYTES)
        gso_buf = BurstBuffer(
            max(RECV_BUFFER_BYTES, NATIVE_BUFFERS_PER_POLL * GSO_MAX_BUFFER_BYTES),
            stamps=p.one_way_latency,
        )
        reply_buf = bytearray(RECV_BUFFER_BYTES)
        # the native burst path when it is built and passes its self-check (engine.native)
        self.data_path = choose_data_path(p.native, gso_buf, buf, reply_buf, p.gso_max_segments)
        self.ticks = TickState(p.tdf)
        self.clock = self.ticks.clock
        # sockets default to the data class; a QP in another class (qp_dscp) says so per send
        tos_data = t.dscp << 2 | t.data_ecn_bits
        tos_ack = t.ack_dscp_value << 2 | t.ack_ecn_bits
        tos_cnp = t.cnp_dscp << 2 | t.cnp_ecn_bits
        max_packet_wire_bytes = (
            BTH_BYTES + t.path_mtu_bytes + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.finished: asyncio.Future[None] | None = None
        self._tick_handle: asyncio.Handle | None = None
        self._in_tick = False
        self._flush_clock = FlushClock(self.params.event_batch_s, self.params.stats_period_s)
        self.sockets = RankSockets(
            spec.ranks,
            spec.addresses.values(),
            p,
            t.path_mtu_bytes,
            self.offloads,
            self.events,
            tos_data,
            pipe,
        )
        self.stats = Counters(
            self.sockets.ranks,
            self.sockets.xdp_nics,
            self.send_conns,
            self.recv_conns,
            self.counters,
            self.drops,
            self.ticks,
            p.tdf,
        )
        failures = SendFailures(self.counters, t.path_mtu_bytes)
        xdp_sender = XdpSender(
            self.counters,
            self.stats.count_class,
            failures,
            self.data_path,
            gso_buf,
            reply_buf,
            latency=p.one_way_latency,
            tos_ack=tos_ack,
            tos_cnp=tos_cnp,
            max_packet_wire_bytes=max_packet_wire_bytes,
        )
        self.send = SendPath(
            p,
            self.offloads,
            self.counters,
            self.stats.count_class,
            failures,
            xdp_sender,
            self.data_path,
            gso_buf,
            reply_buf,
            self.active,
            self.recv_conns,
            tos_ack=tos_ack,
            tos_cnp=tos_cnp,
            max_packet_wire_bytes=max_packet_wire_bytes,
        )
        reader = self.data_path.reader
        drain = (
            ReceiveDrain(reader, reply_buf, gso=self.offloads.gso, max_segments=p.gso_max_segments)
            if reader is not None and p.native_drain
            else None
        )
        self.receive = ReceivePath(
            t,
            self.clock,
            self.events,
            self.counters,
            frozenset(spec.addresses.values()),
            self.recv_conns,
            buf,
            self.data_path.reader,
            self.stats.count_class,
            self.stats.observe,
            self.send.send_replies,
            self.sockets.sport_socket,
            self._after_reads,
            receive_wait=self.stats.receive_wait,
            latency=p.one_way_latency,
            drain=drain,
            tos_ack=tos_ack,
            send_failed=failures.failed,
        )
        self.stats.collectors.append(self.receive.collect)
        self.xdp = XdpPacer(
            self.sockets.xdp_ports,
            self.sockets.xdp_group,
            self.ticks,
            self.counters,
            buf,
            self.receive.one_read,
            self._after_reads,
            self._tick_now,
            latency=p.one_way_latency,
        )
        self.flows = FlowStarts(
            spec.addresses,
            spec.profiles,
            p,
            t,
            self.sockets,
            gso_buf,
            self.events,
            self.out,
            self.ticks,
            self.send_conns,
            self.active,
            self.counters,
        )
        self.reports = EventReports(
            self.events,
            self.out,
            self.counters,
            self.drops,
            self.send_conns,
            self.recv_conns,
            self.ticks.lag_s,
            self.flows.deps_done,
            self.active.completed,
            relay=spec.relay,
            rate_sample_s=p.rate_sample_s,
            data_wait_s=self.receive.data_wait_s,
            ack_wait_s=self.receive.ack_wait_s,
        )
        # what the tick and every read call
        self._pump = self.send.pump
        self._handle_events = self.reports.handle_events
        self._xdp_lead_s = p.tick_s / p.tdf if self.sockets.xdp_nics else 0.0
        self.flows.add(spec.flows, spec.connections)
        # the plan's queue pairs, opened before the clock starts (WorkerSpec.ahead)
        mine = self.sockets.ranks
        self.flows.open_ahead([q for q in spec.ahead if q[1] in mine])
        self.receive.open_ahead(mine, spec.addresses, [q for q in spec.ahead if q[2] in mine])

    # -- the tick -------------------------------------------------------------------------
    def _start(self) -> None:
        ticks = self.ticks
        ticks.started = True
        self.stats.run_started()
        self.flows.start(max(self.clock.now(), 0.0))
        ticks.next_tick_wall = time.perf_counter()
        self._flush_clock.start(ticks.next_tick_wall)
        self._tick()

    def _tick(self) -> None:
        assert self.loop is not None
        if self.finished is None or self.finished.done():
            return
        self._in_tick = True
        try:
            self._tick_body()
        finally:
            self._in_tick = False

    def _tick_body(self) -> None:
        assert self.loop is not None
        ticks = self.ticks
        now = self.clock.now()
        start_wall = time.perf_counter()
        if ticks.last_tick_wall:
            ticks.max_tick_gap_s = max(ticks.max_tick_gap_s, start_wall - ticks.last_tick_wall)
            ticks.lateness.add(max(start_wall - ticks.next_tick_wall, 0.0))
        ticks.last_tick_wall = start_wall
        self.flows.post_delayed(now)
        for conn in list(self.active.values()):
            deadline = conn.qp.next_timer_s()
            if deadline is not None and deadline <= now:
                conn.qp.on_timer(now=now)
        # A tick that fires late (uvloop timers round to 1 ms) gets the credit the on-time
        # tick would have had: its bucket is deeper by the lateness, at most one tick.
        tick = self.params.tick_s
        late_s = min(max(start_wall - ticks.next_tick_wall, 0.0), tick)
        self._pump(now + self._xdp_lead_s, late_s / self.params.tdf)
        self._handle_events()
        wall = time.perf_counter()
        flush, stats = self._flush_clock.due(wall)
        if flush:
            self._flush(now, stats=stats)
        elif self.reports.flush_now:
            self._flush(now)
        ticks.next_tick_wall += tick
        if ticks.next_tick_wall < wall:
            ticks.next_tick_wall = wall + tick  # fell behind: do not try to catch up in a burst
        self._tick_handle = self.loop.call_later(ticks.next_tick_wall - wall, self._tick)
        if self.sockets.xdp_group is not None:
            self.xdp.pace()  # the ports' backlogs until the next tick (xdp_path.py)

    def _tick_now(self) -> None:
        """Run the next tick at once instead of on its timer (the AF_XDP drain ran up to it)."""
        if self.loop is not None and self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = self.loop.call_soon(self._tick)

    def _after_reads(self, now: float, rank: Rank | None = None) -> None:
        """What the reads produced: events handled, packets the ACKs released sent (after a
        read on one rank's socket, on the NICs it can have given work to), a relay's completion
        flushed; then the tick, if it is due.

        The loop calls every readable socket's reader before it looks at its timers: with a
        worker's eight ranks readable at once, each read a few ms under load, the tick came 16-20
        ms late at p99 on the main job at TDF 4500 (its DCQCN timers and pacing with it) while
        no single callback took over 20 ms. Run between reads, it is late by one read at most."""
        self._handle_events()
        if self.active:
            self._pump(self.clock.now(), 0.0, None if rank is None else rank.nic)
        if self.reports.flush_now:
            self._flush(now)
        ticks = self.ticks
        if (
            rank is not None
            and ticks.started
            and not self._in_tick
            and time.perf_counter() >= ticks.next_tick_wall
            and self._tick_handle is not None
        ):
            self._tick_handle.cancel()
            self._tick()

    def _flush(self, now: float, stats: bool = False) -> None:
        """The events so far to the coordinator (periodically, FlushClock, and at once for a
        completion another worker waits for, hundreds of times a second); with `stats`, the
        worker's counters too. A periodic flush with neither sends nothing."""
        self.reports.flush_now = False
        if not stats and not self.out:
            return
        # the list stays (the flows and the reports hold it): its contents go
        out = self.out[:]
        self.out.clear()
        self.pipe.send(("events", out, self.stats.report(now) if stats else None))

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
                self.clock.start_wall_s = msg[1]  # the common start: every part reads it
                self.loop.call_later(max(delay, 0.0), self._start)
            elif kind == "deps_done":
                self.flows.deps_done(msg[1], self.clock.now())
                self._pump(self.clock.now())
            elif kind == "flows":
                # flows handed out at run time: the coordinator waits for each completion
                if len(msg) > 3:  # released by a completion at target time msg[3]
                    self.stats.dependency_arrived(self.clock.now(), msg[3], msg[4])
                self.reports.relay.update(f.id for f in msg[1])
                self.flows.add(msg[1], msg[2])
                if self.ticks.started:
                    self._pump(self.clock.now())
            elif kind == "stop":
                self._stop()
                return

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
        for rank in self.sockets.ranks.values():
            if rank.rx_sock is not None:
                loop.add_reader(rank.rx_sock.fileno(), self.receive.on_readable, rank)
        for nic in self.sockets.xdp_nics:
            for fd in nic.port.fds:
                loop.add_reader(fd, self.xdp.on_readable, nic)
        xdp_nics = self.sockets.xdp_nics
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
                    **({"xdp_recorded": self.sockets.xdp_recorded} if xdp_nics else {}),
                },
            )
        )
        try:
            loop.run_until_complete(self.finished)
            now = self.clock.now()
            self._handle_events()
            self.pipe.send(
                ("bye", self.out, {**self.stats.report(now), **self.stats.queue_pairs()})
            )
        finally:
            loop.close()
            self.close()

    def close(self) -> None:
        self.sockets.close()


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
