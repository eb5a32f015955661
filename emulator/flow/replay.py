"""The trace's flows over the fluid fabric: the driver's releases and compute delays, each queue
pair's messages in order, completions handed back, what each flow counted.

A queue pair (src, dst, QP, UDP source port) gets its path from the same ECMP hash as the
fabric's (fabrics.topology.Topology.path, the kernel's choice with a fixed seed) and keeps its
DCQCN state across its messages, as a NIC's QP does. A message completes when its source has
sent its last byte, plus the queueing that byte meets on the path (each queue's bytes over its
link's rate) and the path's serialization and propagation: the same instant the packet simulator
would see the last byte arrive, to within a step.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from emulator.flow.model import FluidFabric, StepResult
from emulator.schedule.driver import FlowDriver, FlowLike, is_delay
from fabrics.topology import Topology


@dataclass
class FlowCounts:
    """A flow (message): its bytes and, once it ends, what it counted as its queue pair's head
    (while it is the head, FlowReplay counts for it in arrays)."""

    flow_id: int
    started_s: float
    size_bytes: float
    packets: int  # its packets at the path MTU (no retransmissions: the model is lossless)
    ce: float = 0.0
    cnps: int = 0


@dataclass
class QueuePair:
    index: int  # in the fluid fabric
    src: int
    latency_s: float  # serialization of one packet per hop plus the links' delays
    path: list[int]
    queue: deque[FlowCounts] = field(default_factory=deque)


@dataclass(frozen=True)
class Finished:
    flow_id: int
    time_s: float
    packets: int
    ce_marks: int
    cnps: int


class FlowReplay:
    """Runs the driver over a FluidFabric; `advance(until)` steps it."""

    def __init__(
        self,
        fabric: FluidFabric,
        topology: Topology,
        link_index: dict[tuple[str, str], int],
        driver: FlowDriver,
        *,
        mtu_bytes: int,
        link_delay_s: float,
        on_started: Callable[[int, float], None],
        on_finished: Callable[[Finished], None],
        max_rates_bps: Sequence[float | None] = (),
        on_step: Callable[[StepResult], None] = lambda result: None,
    ) -> None:
        self.fabric = fabric
        self.topology = topology
        self.link_index = link_index
        self.driver = driver
        self.mtu_bytes = mtu_bytes
        self.link_delay_s = link_delay_s
        self.on_started = on_started
        self.on_finished = on_finished
        self.max_rates_bps = tuple(max_rates_bps)  # by QP profile (0: the transport's own)
        self.on_step = on_step  # every step's result (the backend's port and NIC counters)
        self.now = 0.0
        self.qps: dict[tuple[int, int, int, int], QueuePair] = {}
        self.by_index: list[QueuePair] = []
        self.released: set[int] = set()
        self.finished: set[int] = set()
        self._delays: list[tuple[float, int]] = []  # (due, token)
        self._completions: list[tuple[float, int, Finished]] = []  # (due, seq, what)
        self._seq = 0
        self.steps = 0
        # the head message of each queue pair (by fabric index): bytes left, CE and CNPs so far
        self._left = np.zeros(64)
        self._ce = np.zeros(64)
        self._cnps = np.zeros(64, dtype=np.int64)

    @property
    def done(self) -> bool:
        return self.driver.finished and len(self.finished) == len(self.released)

    def start(self) -> None:
        self._poll()

    def advance(self, until_s: float) -> None:
        """Step to `until_s`; a plan that can no longer move raises the driver's stall error."""
        dt = self.fabric.dt
        while self.now + dt / 2 < until_s and not self.done:
            self._fire(self.now)
            if self.done:
                break
            fabric = self.fabric
            sending = bool(fabric.active[: fabric.n].any())
            if not sending and not self._delays and not self._completions:
                if self.driver.unstall():
                    self._poll()
                    continue
                raise self.driver.stall_error()
            # the fabric also moves while a reaction point recovers its rate (as a NIC's does
            # while its queue pair is idle) or a queue drains: jumping over those left queues
            # full and rates cut across a compute gap or a wait for a completion
            busy = sending or bool(fabric.rp_on[: fabric.n].any() or fabric.queue_bytes.any())
            if not busy:
                # nothing sends: jump to the next timer (a compute delay or a completion)
                due = min(
                    [d for d, _ in self._delays[:1]] + [d for d, _, _ in self._completions[:1]]
                )
                self.now = max(self.now, min(due, until_s))
                self._fire(self.now)
                if self.now >= until_s:
                    break
                continue
            self._step()
            self.now += dt

    def _step(self) -> None:
        fabric = self.fabric
        result = fabric.step()
        self.on_step(result)
        self.steps += 1
        end = self.now + fabric.dt
        # the heads' counts, vectorized: a step of an All-to-All moves every queue pair
        qps, moved = result.qps, result.delivered_bytes
        self._ensure(fabric.n)
        self._left[qps] -= moved
        self._ce[qps] += result.ce_packets
        self._cnps[qps] += result.cnps
        ends = np.flatnonzero(fabric.active[qps] & (self._left[qps] <= 1e-6))
        if not len(ends):
            return
        queue_delay = fabric.queue_bytes * 8.0 / fabric.links.capacity_bps
        for k in ends:
            i = int(qps[k])
            qp = self.by_index[i]
            head = qp.queue.popleft()
            left = float(self._left[i])
            # the last byte left within the step; it then waits in the path's queues
            step_bytes = float(moved[k])
            overshoot = -left / step_bytes if step_bytes > 0 else 0.0
            last_s = end - overshoot * fabric.dt
            due = last_s + float(queue_delay[qp.path].sum()) + qp.latency_s
            head.ce, head.cnps = float(self._ce[i]), int(self._cnps[i])
            self._complete(due, head)
            if qp.queue:
                # the next message starts with the bytes already sent past this one's end
                self._begin(i, qp.queue[0].size_bytes + min(0.0, left))
            else:
                fabric.active[i] = False

    def _ensure(self, n: int) -> None:
        """Room for `n` queue pairs in the heads' count arrays."""
        if n > len(self._left):
            size = max(n, 2 * len(self._left))
            for name in ("_left", "_ce", "_cnps"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def _begin(self, index: int, remaining_bytes: float) -> None:
        """A queue pair's next message becomes its head: its counts start from zero."""
        self._left[index] = remaining_bytes
        self._ce[index] = 0.0
        self._cnps[index] = 0

    def _complete(self, due: float, head: FlowCounts) -> None:
        what = Finished(head.flow_id, due, max(1, round(head.packets)), round(head.ce), head.cnps)
        heapq.heappush(self._completions, (due, self._seq, what))
        self._seq += 1

    def _fire(self, now: float) -> None:
        """Compute delays over and completions due by `now`, then what the driver releases."""
        moved = False
        while self._delays and self._delays[0][0] <= now + 1e-12:
            due, token = heapq.heappop(self._delays)
            self.driver.delay_done(token, due)
            moved = True
        while self._completions and self._completions[0][0] <= now + 1e-12:
            _, _, what = heapq.heappop(self._completions)
            self.finished.add(what.flow_id)
            self.on_finished(what)
            self.driver.flow_done(what.flow_id, what.time_s)
            moved = True
        if moved:
            self._poll()

    def _poll(self) -> None:
        now = self.now
        for action in self.driver.poll(now):
            if is_delay(action):
                heapq.heappush(self._delays, (now + action.delay_s, action.token))
            else:
                self._post(action, now)

    def _post(self, flow: FlowLike, now: float) -> None:
        self.released.add(flow.id)
        qp = self._queue_pair(flow)
        packets = max(1, -(-flow.bytes // self.mtu_bytes))
        qp.queue.append(FlowCounts(flow.id, now, float(flow.bytes), packets))
        if len(qp.queue) == 1:
            self._ensure(self.fabric.n)
            self._begin(qp.index, float(flow.bytes))
        self.fabric.backlog[qp.index] += flow.bytes
        self.fabric.active[qp.index] = True
        self.on_started(flow.id, now)

    def _queue_pair(self, flow: FlowLike) -> QueuePair:
        key = (flow.src, flow.dst, flow.qp, flow.udp_sport)
        qp = self.qps.get(key)
        if qp is not None:
            return qp
        topo = self.topology
        hosts = topo.hosts
        links = topo.path(hosts[flow.src], hosts[flow.dst], flow.udp_sport)
        path = [self.link_index[(link.src, link.src_ifname)] for link in links]
        latency = sum(self.mtu_bytes * 8.0 / link.rate_bps for link in links)
        latency += self.link_delay_s * len(links)
        line = topo.links[(hosts[flow.src], links[0].src_ifname)].rate_bps
        if 0 < flow.profile < len(self.max_rates_bps):
            line = min(line, self.max_rates_bps[flow.profile] or line)  # a profile's cap
        index = self.fabric.add(path, line)
        self.fabric.backlog[index] = 0.0  # its messages' bytes, as they are posted
        qp = QueuePair(index, flow.src, latency, path)
        self.qps[key] = qp
        self.by_index.append(qp)
        return qp
