"""The coordinator: shards ranks over worker processes, releases them together, relays completions,
and turns what they report into collectors events.

Life of a run: check the plan; give every connection (src, dst, qp, sport) a QP number; start the
workers (each opens its ranks' sockets in their namespaces and says "ready"); send all of them
the same start instant (a perf_counter reading shortly in the future: CLOCK_MONOTONIC is shared by
the machine's processes); then wait on their pipes and process sentinels. A flow's completion is
relayed to the workers whose flows depend on it. FlowFinished is emitted once the sender's
completion (last byte acknowledged) and the receiver's record of the message (its CE marks and
CNPs) are both in. A worker that exits early fails the run with its message, and the others are
stopped; Ctrl-C stops every worker within a fraction of a second and re-raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from emulator.engine.af_xdp_setup import AfXdpUnavailable
from emulator.engine.clock import DilatedClock
from emulator.engine.driver import DelayLike, FlowDriver, is_delay
from emulator.engine.gcpause import GcPauses, frozen_heap
from emulator.engine.launch import Launcher, LocalLauncher, WorkerProcess
from emulator.engine.params import EngineParams
from emulator.engine.plan import (
    MAX_CONNECTIONS,
    EngineFlow,
    FlowLike,
    RankEndpoint,
    check_plan,
    from_schedule_flow,
)
from emulator.engine.run_metadata import run_metadata
from emulator.engine.worker_spec import QueuePairAhead, WorkerSpec
from emulator.engine.xdp_ports import ledger_answer, ledger_items
from emulator.errors import EXIT_EXPECTATION_FAILED, EmulatorError, PlanError
from emulator.events import FlowFinished, FlowStarted, RateSample, RunEvent
from emulator.latency import LatencyHistogram, merged
from emulator.transport.params import TransportParams
from emulator.transport.qp_profile import DEFAULT_PROFILE, QpProfile

START_MARGIN_S = 0.05  # between "go" and the common start: every worker gets the message first
STOP_GRACE_S = 0.4  # how long a stopping worker may take before it is terminated


class EngineFailure(EmulatorError):
    """The engine could not complete the plan: a worker died, or the run exceeded its limit."""

    exit_code = EXIT_EXPECTATION_FAILED


@dataclass
class RunOutcome:
    """What a run produced: collectors events (target timescale) and the run's metadata."""

    # the events, when no on_events consumer took them as they came (else empty: a run's
    # recorder has them, and a long run's would otherwise pile up here unread)
    events: list[RunEvent]
    metadata: dict[str, Any]
    finished: dict[int, FlowFinished] = field(default_factory=dict)
    started: dict[int, FlowStarted] = field(default_factory=dict)
    received_bytes: dict[int, int] = field(default_factory=dict)  # by flow, at the receiver

    def fct_s(self, flow_id: int) -> float:
        return self.finished[flow_id].time_s - self.started[flow_id].time_s


@dataclass
class QpCounters:
    """Per-QP counters of a run, as the workers hand them over: the connections (src, dst, qp,
    sport) -> connection id (QP number = id + 1), and by QP number the sender's and the
    receiver's counter lists (columns: collectors.queue_pairs) and the one-way latency."""

    connections: dict[tuple[int, int, int, int], int]
    send: dict[int, list[int]] = field(default_factory=dict)
    recv: dict[int, list[int]] = field(default_factory=dict)
    latency: dict[int, LatencyHistogram] = field(default_factory=dict)


@dataclass
class _WorkerHandle:
    index: int
    process: WorkerProcess
    pipe: Connection
    ranks: tuple[int, ...]
    where: str = ""  # "" on this machine, else the server (emulator.engine.launch)
    info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    gone: bool = False


def _ranks_text(ranks: Sequence[int]) -> str:
    shown = ", ".join(map(str, list(ranks)[:8]))
    return f"ranks [{shown}{', ...' if len(ranks) > 8 else ''}] ({len(ranks)})"


def assign_connections(flows: Sequence[EngineFlow]) -> dict[tuple[int, int, int, int], int]:
    """A connection id per (src, dst, qp, sport), in plan order; QP number = id + 1 both ends."""
    conns: dict[tuple[int, int, int, int], int] = {}
    for f in flows:
        conns.setdefault(f.connection_key, len(conns))
    if len(conns) > MAX_CONNECTIONS:
        raise PlanError(f"plan needs {len(conns)} queue pairs, more than 24-bit QP numbers allow")
    return conns


class Coordinator:
    def __init__(
        self,
        ranks: Sequence[RankEndpoint],
        flows: Sequence[EngineFlow],
        *,
        transport: TransportParams | None = None,
        engine: EngineParams | None = None,
        on_events: Callable[[list[RunEvent]], None] | None = None,
        on_ready: Callable[[list[int]], None] | None = None,
        driver: FlowDriver | None = None,
        on_start: Callable[[float], None] | None = None,
        profiles: Sequence[QpProfile] = (),
        tag_of: Callable[[FlowLike], int] | None = None,
        launcher: Launcher | None = None,
        on_ledger: Callable[[list[dict[str, Any]]], None] | None = None,
        queue_pairs: Mapping[tuple[int, int, int, int], int] | None = None,
    ) -> None:
        """Run `flows` (a static plan), or the flows `driver` hands out as the run goes.
        `queue_pairs`: the connections (EngineFlow.connection_key -> QP profile) the driver's
        flows will use, as the plan saw them (emulator.schedule.ideal.IdealResult.queue_pairs):
        their queue pairs open at both ends before the clock starts. Opened at first use,
        each cost its worker ~50 us (its socket in the namespace, ICRC context, DCQCN state):
        an All-to-All's first phase opens hundreds at once, and the replay's first iteration
        read several times the engine delay of the others. A flow on a connection the plan
        did not see still opens its own.
        `profiles[i]` says how the QPs of flows with profile i send (0: the transport's way).
        `tag_of` gives each flow the driver hands out its attribution tag (the BTH reserved
        bits its data packets carry, emulator.planning.attribution); None: untagged.

        on_start is told the common start instant (a time.perf_counter reading) before the
        workers are released: target time is (perf_counter - start) / TDF from then on.
        `launcher` starts the workers (default: child processes of this one; emulator.backends.cluster:
        on the servers of a Ray cluster). `on_ledger` records what a worker is about to attach
        (its AF_XDP ports' XDP programs) in the run's ledger, before the worker attaches it
        (None: nothing records them; the kernel still detaches them with the worker)."""
        self.on_start = on_start
        self.on_ledger = on_ledger
        if driver is not None and flows:
            raise PlanError("give the engine either a static plan or a driver, not both")
        check_plan(flows, ranks)
        self.profiles = (DEFAULT_PROFILE, *profiles[1:]) if profiles else (DEFAULT_PROFILE,)
        self._conn_profile: dict[tuple[int, int, int, int], int] = {}
        for f in flows:
            self._check_profile(f)
        self.on_ready = on_ready
        self.driver = driver
        self.tag_of = tag_of
        self.known_ranks = {r.rank for r in ranks}
        self.ranks = list(ranks)
        self.flows = {f.id: f for f in flows}
        self.transport = transport or TransportParams()
        self.engine = engine or EngineParams()
        self.on_events = on_events
        self.connections = assign_connections(flows)
        self.ahead: list[QueuePairAhead] = []
        for key, profile in (queue_pairs or {}).items():
            src, dst, qp, sport = key
            if src not in self.known_ranks or dst not in self.known_ranks:
                continue  # a rank without an endpoint: its flows will say so
            if not 0 <= profile < len(self.profiles):
                continue  # its flows will say so (_check_profile)
            if self._conn_profile.setdefault(key, profile) != profile:
                continue
            if key not in self.connections:
                conn_id = self.connections[key] = len(self.connections)
                self.ahead.append((conn_id, src, dst, qp, sport, profile))
        self.launcher: Launcher = launcher or LocalLauncher(self.engine.start_method)
        self.shards = self.launcher.shards(self.ranks, self.engine.workers)
        self.owner = {r.rank: i for i, shard in enumerate(self.shards) for r in shard}
        self.needers: dict[int, set[int]] = {}
        for f in flows:
            for dep in f.deps:
                w = self.owner[f.src]
                if self.owner[self.flows[dep].src] != w:
                    self.needers.setdefault(dep, set()).add(w)
        self.workers: list[_WorkerHandle] = []
        self.events: list[RunEvent] = []
        self.started: dict[int, FlowStarted] = {}
        self.finished: dict[int, FlowFinished] = {}
        self.received_bytes: dict[int, int] = {}
        self._done: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._rx: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._done_ids: set[int] = set()
        self._start_wall = self._created_wall = time.perf_counter()
        self._completions: list[tuple[int, float]] = []
        self._gc_pauses: GcPauses | None = None  # this process's, during the replay

    # -- public ---------------------------------------------------------------------------
    def run(self) -> RunOutcome:
        wall0 = self._created_wall = time.perf_counter()
        try:
            self._spawn()
            self._wait_ready()
            if self.on_ready is not None:
                self.on_ready(self.worker_pids)
            # What starts at target time 0, asked before the clock runs: a schedule does its
            # setup at its first poll (reading the trace's nodes: 1 s for 8 ranks, 3 s for 16
            # here), which after the start instant would delay the whole replay by that much
            # wall time, 3 s / TDF of target time at the first compute node.
            first = None if self.driver is None else list(self.driver.poll(0.0))
            # What this process holds by now (the trace, the plan, the schedule, the fabric's
            # and the recorder's bookkeeping) lives for the run: out of the collector's way
            # (collected first, before the start instant). Each full collection walked all of
            # it: 8 in a main-job run at TDF 4600, up to 400 ms each with every thread here
            # stopped (the dependencies' relay, the sampler) and a core taken from the workers.
            with frozen_heap(collect_first=True) as (_, pauses):
                self._gc_pauses = pauses  # the replay's collections
                start = time.perf_counter() + START_MARGIN_S
                self._start_wall = start
                if self.on_start is not None:
                    self.on_start(start)
                for w in self.workers:  # the instant in each worker's own clock
                    w.pipe.send(("go", start + self.launcher.clock_offset_s(w.index)))
                if self.driver is None or first is None:
                    self._main_loop(start)
                else:
                    self._drive(self.driver, start, first)
                self._stop_all(graceful=True)
        except BaseException:
            self._stop_all(graceful=False)
            raise
        return RunOutcome(
            self.events,
            self._metadata(time.perf_counter() - wall0),
            self.finished,
            self.started,
            self.received_bytes,
        )

    @property
    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self.workers if w.process.pid is not None]

    # -- start ----------------------------------------------------------------------------
    def _spawn(self) -> None:
        addresses = {r.rank: r.address for r in self.ranks}
        for i, shard in enumerate(self.shards):
            members = {r.rank for r in shard}
            flows = tuple(f for f in self.flows.values() if f.src in members)
            ahead = tuple(q for q in self.ahead if q[1] in members or q[2] in members)
            spec = WorkerSpec(
                index=i,
                ranks=shard,
                addresses=addresses,
                flows=flows,
                connections={f.connection_key: self.connections[f.connection_key] for f in flows},
                transport=self.transport,
                engine=self.engine,
                profiles=self.profiles,
                relay=frozenset(f.id for f in flows if f.id in self.needers),
                ahead=ahead,
            )
            process, pipe = self.launcher.launch(spec)
            self.workers.append(
                _WorkerHandle(i, process, pipe, tuple(sorted(members)), self.launcher.where(i))
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.engine.start_timeout_s
        while not all(w.ready for w in self.workers):
            left = deadline - time.monotonic()
            if left <= 0:
                late = [w.index for w in self.workers if not w.ready]
                where = sorted({w.where for w in self.workers if not w.ready and w.where})
                raise EngineFailure(
                    f"engine workers {late}{' on ' + ', '.join(where) if where else ''} did not "
                    "open their sockets within "
                    f"{self.engine.start_timeout_s:g} s (engine.start_timeout_s)"
                )
            self._poll(min(left, 0.1))

    # -- running --------------------------------------------------------------------------
    def _main_loop(self, start_wall: float) -> None:
        deadline = start_wall + self.engine.run_timeout_s
        total = len(self.flows)
        while len(self.finished) < total:
            if time.perf_counter() > deadline:
                left = sorted(set(self.flows) - set(self.finished))[:5]
                raise EngineFailure(
                    f"plan not finished after {self.engine.run_timeout_s:g} s "
                    f"(engine.run_timeout_s); unfinished flows include {left}"
                )
            self._poll(0.05)

    def _drive(
        self, driver: FlowDriver, start_wall: float, first: list[FlowLike | DelayLike]
    ) -> None:
        """Hand out the driver's flows as it releases them, from `first` (what its poll at
        target time 0 gave); run its delays here."""
        clock = DilatedClock(self.engine.tdf, start_wall)
        deadline = start_wall + self.engine.run_timeout_s
        delays: list[tuple[float, int]] = []
        self._completions.clear()
        now = 0.0
        actions = first
        trigger: tuple[float, int] | None = None
        while True:
            self._dispatch(actions, delays, now, trigger)
            running = len(self.flows) - len(self._done_ids)
            if driver.finished and running == 0 and len(self.finished) == len(self.flows):
                return
            if not delays and running == 0 and not driver.finished:
                if driver.unstall():
                    actions = list(driver.poll(now))
                    continue
                raise driver.stall_error()
            if time.perf_counter() > deadline:
                stuck = sorted(set(self.flows) - self._done_ids)
                named = ", ".join(
                    f"{fid} (rank {self.flows[fid].src} -> {self.flows[fid].dst})"
                    for fid in stuck[:5]
                )
                raise EngineFailure(
                    f"run not finished after {self.engine.run_timeout_s:g} s, the run's deadline "
                    f"(engine.run_timeout_s): {len(stuck)} flows in flight did not complete"
                    + (f", e.g. {named}" if named else "")
                )
            wait_s = 0.05
            if delays:
                wait_s = min(wait_s, max(0.0, clock.wall_at(delays[0][0]) - time.perf_counter()))
            self._poll(wait_s)
            now = clock.now()
            for fid, t in sorted(self._completions, key=lambda c: c[1]):
                driver.flow_done(fid, t)
            # flows released now were waiting for these completions (unless a delay also
            # ended: then what released them is ambiguous): the dependency latency's start
            trigger = None
            if self._completions and not (delays and delays[0][0] <= now):
                t, fid = max((t, fid) for fid, t in self._completions)
                trigger = (t, self.owner[self.flows[fid].src])
            self._completions.clear()
            while delays and delays[0][0] <= now:
                due, token = heapq.heappop(delays)
                driver.delay_done(token, due)
            actions = list(driver.poll(now))

    def _dispatch(
        self,
        actions: list[FlowLike | DelayLike],
        delays: list[tuple[float, int]],
        now: float,
        trigger: tuple[float, int] | None = None,
    ) -> None:
        """Send the released flows to their workers. `trigger`: the completion that released
        them (target time, the worker that reported it); the receiving worker measures from it
        the dependency latency (completion at one sender -> dependent flow at another), by
        same_server / cross_server."""
        by_worker: dict[int, list[EngineFlow]] = {}
        for action in actions:
            if is_delay(action):
                heapq.heappush(delays, (now + action.delay_s, action.token))
                continue
            # the driver releases a flow once its dependencies completed: none left to wait for
            flow = dataclasses.replace(
                from_schedule_flow(action),
                deps=(),
                start_delay_s=0.0,
                tag=self.tag_of(action) if self.tag_of is not None else 0,
            )
            self._check_profile(flow)
            for rank in (flow.src, flow.dst):
                if rank not in self.known_ranks:
                    raise PlanError(f"flow {flow.id}: rank {rank} has no endpoint")
            if flow.id in self.flows:
                raise PlanError(f"flow {flow.id}: the driver released it twice")
            self.flows[flow.id] = flow
            self.connections.setdefault(flow.connection_key, len(self.connections))
            by_worker.setdefault(self.owner[flow.src], []).append(flow)
        launcher = self.launcher
        for index, flows in by_worker.items():
            conns = {f.connection_key: self.connections[f.connection_key] for f in flows}
            if trigger is None:
                self.workers[index].pipe.send(("flows", flows, conns))
                continue
            same = launcher.server_of(trigger[1]) == launcher.server_of(index)
            label = "same_server" if same else "cross_server"
            self.workers[index].pipe.send(("flows", flows, conns, trigger[0], label))

    def _poll(self, timeout_s: float) -> None:
        handles: dict[Any, _WorkerHandle] = {}
        for w in self.workers:
            if not w.gone:
                handles[w.pipe] = w
                handles[w.process.sentinel] = w
        for ready in wait(list(handles), timeout_s):
            w = handles[ready]
            if ready is w.pipe:
                self._drain(w)
            elif not w.gone:
                self._drain(w)
                w.process.join(0.1)
                where = f" on {w.where}" if w.where else ""
                why = getattr(w.process, "reason", None)  # what a remote launcher knows
                raise EngineFailure(
                    f"engine worker {w.index}{where} (pid {w.process.pid}, "
                    f"{_ranks_text(w.ranks)}) exited unexpectedly with code "
                    f"{w.process.exitcode}" + (f": {why}" if why else "")
                )

    def _drain(self, w: _WorkerHandle) -> None:
        while not w.gone:
            try:
                if not w.pipe.poll():
                    return
                data = w.pipe.recv_bytes()
            except (EOFError, OSError):
                return
            items = ledger_items(data)
            if items is not None:
                self._record(w, items)
                continue
            msg = pickle.loads(data)  # what Connection.recv does
            kind = msg[0]
            if kind == "ready":
                w.ready = True
                w.info = msg[1]
            elif kind in ("events", "bye"):
                if msg[2] is not None:  # a batch flushed early for a completion has no stats
                    w.stats = msg[2]
                self._take(msg[1])
                if kind == "bye":
                    w.gone = True
            elif kind == "error":
                w.gone = True
                raise EngineFailure(msg[1])
            elif kind == "refused":  # a port that cannot do af_xdp: the run refuses at start
                w.gone = True
                raise AfXdpUnavailable(msg[1] + (f" ({w.where})" if w.where else ""))

    def _record(self, w: _WorkerHandle, items: list[dict[str, Any]]) -> None:
        """A worker's ledger entries (an XDP program it is about to attach): recorded, then
        acknowledged, so the worker attaches only what the ledger holds."""
        w.pipe.send(ledger_answer(self.on_ledger, items))

    def _take(self, batch: list[tuple[Any, ...]]) -> None:
        new: list[RunEvent] = []
        relay: dict[int, list[int]] = {}
        for item in batch:
            kind = item[0]
            if kind == "started":
                ev = FlowStarted(item[1], item[2])
                self.started[item[1]] = ev
                new.append(ev)
            elif kind == "done":
                fid = item[1]
                self._done_ids.add(fid)
                if self.driver is not None:
                    self._completions.append((fid, item[2]))
                for other in self.needers.get(fid, ()):
                    relay.setdefault(other, []).append(fid)
                key = (item[6], item[7])
                self._done[key] = item
                self._join(key, new)
            elif kind == "rx":
                key = (item[1], item[2])
                self._rx[key] = item
                self._join(key, new)
            elif kind == "rate":
                new.append(RateSample(item[3], item[1], item[2], item[4]))
        for index, ids in relay.items():
            target = self.workers[index]
            if not target.gone:
                target.pipe.send(("deps_done", ids))
        if self.on_events is None:
            self.events.extend(new)  # nobody takes them as they come: the outcome holds them
        elif new:
            self.on_events(new)

    def _join(self, key: tuple[int, int], new: list[RunEvent]) -> None:
        done = self._done.get(key)
        rx = self._rx.get(key)
        if done is None or rx is None:
            return
        del self._done[key], self._rx[key]
        _, fid, t, packets, retx, cnps_received, _conn, _ordinal, sender_lag_s, lost_s = done
        # both ends' delay (wall: the read's wait in its socket or the worker's lag) in target
        # time, and the pacing credit lost (target already)
        delay_s = (sender_lag_s + rx[7]) / self.engine.tdf + lost_s
        ev = FlowFinished(
            fid, t, packets, retx, rx[5], rx[6], cnps_received, delay_s, reordered_packets=rx[8]
        )
        self.finished[fid] = ev
        self.received_bytes[fid] = rx[4]
        new.append(ev)

    # -- stop -----------------------------------------------------------------------------
    def _stop_all(self, *, graceful: bool) -> None:
        for w in self.workers:
            if w.process.is_alive():
                with contextlib.suppress(OSError):
                    w.pipe.send(("stop",))
        deadline = time.monotonic() + (2.0 if graceful else STOP_GRACE_S)
        for w in self.workers:
            while graceful and not w.gone and time.monotonic() < deadline:
                try:
                    self._poll_one(w, deadline - time.monotonic())
                except EngineFailure:
                    break
            w.process.join(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(0.2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(0.2)
            w.pipe.close()

    def _poll_one(self, w: _WorkerHandle, timeout_s: float) -> None:
        if wait([w.pipe, w.process.sentinel], max(timeout_s, 0.0)):
            self._drain(w)
            if not w.process.is_alive():
                w.gone = True

    def _check_profile(self, flow: EngineFlow) -> None:
        if not 0 <= flow.profile < len(self.profiles):
            raise PlanError(
                f"flow {flow.id}: QP profile {flow.profile} is not one of the run's "
                f"{len(self.profiles)}"
            )
        # a QP sends one way: two profiles on one (src, dst, qp, sport) would silently be one
        key = flow.connection_key
        first = self._conn_profile.setdefault(key, flow.profile)
        if first != flow.profile:
            src, dst, qp, sport = key
            raise PlanError(
                f"flow {flow.id}: rank {src} -> {dst} QP {qp} on UDP port {sport} is already a "
                "QP of another traffic class (a traffic pattern's ports hashed onto a trace's): "
                "rename the pattern or change collectives.udp_sport_min"
            )

    def queue_pairs(self) -> QpCounters:
        """The tester's per-QP counters, as the workers reported them when they stopped (a
        worker that was killed reports none); collectors.queue_pairs.qp_rows joins them."""
        counters = QpCounters(dict(self.connections))
        for w in self.workers:
            counters.send.update(w.stats.get("send_qps", {}))
            counters.recv.update(w.stats.get("recv_qps", {}))
            for qpn, wire in w.stats.get("qp_latency", {}).items():
                counters.latency[qpn] = LatencyHistogram.from_wire(wire)
        return counters

    def latency_by_class(self) -> dict[int, LatencyHistogram]:
        """One-way latency so far per traffic class (DSCP as received), over every worker
        (safe to call from another thread: it only reads the workers' last reports)."""
        per_class: dict[int, list[LatencyHistogram]] = {}
        for w in list(self.workers):
            for dscp, wire in dict(w.stats.get("latency", {})).items():
                per_class.setdefault(int(dscp), []).append(LatencyHistogram.from_wire(wire))
        return {dscp: merged(hs) for dscp, hs in per_class.items()}

    def dependency_latency(self) -> dict[str, dict[str, float | int | None]]:
        """Per same_server / cross_server: how many released flows, and the wall p50/p99/max
        (ms) of their dependency latency with the target time it stands for (us)."""
        by_label: dict[str, list[LatencyHistogram]] = {}
        for w in self.workers:
            for label, wire in w.stats.get("dep_latency", {}).items():
                by_label.setdefault(label, []).append(LatencyHistogram.from_wire(wire))
        out: dict[str, dict[str, float | int | None]] = {}
        tdf = self.engine.tdf
        for label, hs in sorted(by_label.items()):
            h = merged(hs)
            out[label] = {"count": h.count, **_wall_and_target(h, tdf)}
        return out

    def receive_wait(self) -> dict[str, float | int | None]:
        """How long reads waited in the rank sockets (kernel stamp to the read), over every
        worker: how many reads, the wall p50/p99/max (ms) and the target time they stand for
        (us). A NIC answers a packet as it arrives; this is the part of every reply, message
        completion and FCT that the engine, not the fabric, put there."""
        h = merged(
            [
                LatencyHistogram.from_wire(w.stats["receive_wait"])
                for w in self.workers
                if "receive_wait" in w.stats
            ]
        )
        tdf = self.engine.tdf
        return {
            "reads": h.count,
            **_wall_and_target(h, tdf),
            "target_max_us": round(h.max_s / tdf * 1e6, 4),
        }

    def metadata(self) -> dict[str, Any]:
        """The run's metadata so far (also after a run that failed or was interrupted)."""
        return self._metadata(time.perf_counter() - self._created_wall)

    def _metadata(self, wall_s: float) -> dict[str, Any]:
        return run_metadata(
            [w.info for w in self.workers],
            [w.stats for w in self.workers],
            tdf=self.engine.tdf,
            wall_s=wall_s,
            run_wall_s=max(time.perf_counter() - self._start_wall, 1e-9),
            dependency_latency=self.dependency_latency(),
            latency_by_class=self.latency_by_class(),
            receive_wait=self.receive_wait(),
            coordinator_gc_pauses=self._gc_pauses.to_json() if self._gc_pauses else None,
        )


def _wall_and_target(h: LatencyHistogram, tdf: float) -> dict[str, float | None]:
    """A histogram of wall seconds as the metadata gives it: the wall p50/p99/max (ms) and the
    target time the percentiles stand for (us)."""
    p50, p99 = h.percentile_s(50.0), h.percentile_s(99.0)
    return {
        "wall_p50_ms": None if p50 is None else round(p50 * 1e3, 3),
        "wall_p99_ms": None if p99 is None else round(p99 * 1e3, 3),
        "wall_max_ms": round(h.max_s * 1e3, 3),
        "target_p50_us": None if p50 is None else round(p50 / tdf * 1e6, 4),
        "target_p99_us": None if p99 is None else round(p99 / tdf * 1e6, 4),
    }


def run_plan(
    ranks: Sequence[RankEndpoint],
    flows: Sequence[EngineFlow],
    *,
    transport: TransportParams | None = None,
    engine: EngineParams | None = None,
    on_events: Callable[[list[RunEvent]], None] | None = None,
    driver: FlowDriver | None = None,
) -> RunOutcome:
    """Run `flows` (or what `driver` releases) between `ranks` on real sockets; blocks until
    every flow finished."""
    return Coordinator(
        ranks, flows, transport=transport, engine=engine, on_events=on_events, driver=driver
    ).run()
