"""The egress-share yardstick: each rank's NIC shares its line rate among its active flows, and
nothing else limits them (`run.ideal: egress_share`).

The max-min fluid network (emulator.schedule.fluid) refills every link's shares whenever the
flow set changes: exact, but each refill walks every active path class, and their number and
the number of refills both grow with the job. At 16,384 ranks a MoE step has about a million
queue pairs in flight and well over a million distinct completion instants (moe_mix_1024:
96,994 refills for 639k flows), so the exact yardstick takes hours where the flow-level run
itself takes minutes. Here each NIC is a processor-sharing queue of its own (max-min on one
link, with the flows' rate caps): an event touches one rank's flows only.

It equals the max-min yardstick wherever every flow's bottleneck is its sender's NIC (an
All-to-All or a ring on a non-blocking fabric without ECMP collisions); elsewhere (an incast
onto a receiver, flows sharing an uplink) it is optimistic: the receivers and the fabric do not
limit it. tests/unit/test_egress_share.py holds both.
"""

from __future__ import annotations

import heapq
import math

_REL_EPS = 1e-9  # as emulator.schedule.fluid: done within a byte fraction ...
_TIME_EPS = 1e-12  # ... or a time step below the clock's resolution


class EgressShareNetwork:
    """The same interface as FluidNetwork (add, next_completion, advance) for the ideal run."""

    def __init__(self, line_rate_bps: float) -> None:
        if line_rate_bps <= 0:
            raise ValueError(f"line rate {line_rate_bps} bit/s")
        self.capacity = line_rate_bps / 8.0  # bytes/s
        self.now = 0.0
        self.recomputes = 0
        # rank -> {flow id: [bytes left, cap in bytes/s (inf: none), rate, bytes at start]}
        self._flows: dict[int, dict[int, list[float]]] = {}
        self._since: dict[int, float] = {}  # rank -> when its flows' bytes left were last updated
        self._version: dict[int, int] = {}  # rank -> stamp of its live heap entry
        self._heap: list[tuple[float, int, int]] = []  # (next completion, rank, stamp)
        self._instant: list[int] = []
        self._dirty: set[int] = set()

    def add(
        self,
        flow_id: int,
        src: int,
        dst: int,
        sport: int,
        nbytes: int,
        max_rate_bps: float | None = None,
    ) -> None:
        del sport
        if src == dst or nbytes <= 0:
            self._instant.append(flow_id)
            return
        self._catch_up(src)
        cap = math.inf if max_rate_bps is None else max_rate_bps / 8.0
        self._flows.setdefault(src, {})[flow_id] = [float(nbytes), cap, 0.0, float(nbytes)]
        self._dirty.add(src)

    def next_completion(self) -> float:
        """Absolute time of the next flow completion (inf when nothing is active)."""
        if self._instant:
            return self.now
        self._settle()
        while self._heap:
            t, rank, stamp = self._heap[0]
            if self._version.get(rank) == stamp:
                return max(t, self.now)
            heapq.heappop(self._heap)
        return math.inf

    def advance(self, t: float) -> list[int]:
        """Move the clock to t and return the flows completed by then."""
        self._settle()
        done, self._instant = self._instant, []
        self.now = t
        while self._heap and self._heap[0][0] <= t * (1 + _REL_EPS) + _TIME_EPS:
            _, rank, stamp = heapq.heappop(self._heap)
            if self._version.get(rank) != stamp:
                continue
            self._catch_up(rank)
            flows = self._flows[rank]
            slack = _TIME_EPS * max(1.0, t)
            finished = [
                fid
                for fid, (left, _cap, rate, size) in flows.items()
                if left <= max(rate * slack, _REL_EPS * size)
            ]
            for fid in finished:
                del flows[fid]
            done.extend(finished)
            self._dirty.add(rank)
        return done

    def _catch_up(self, rank: int) -> None:
        """Bring the rank's bytes left to now at the rates it had."""
        since = self._since.get(rank, self.now)
        dt = self.now - since
        if dt > 0:
            for flow in self._flows.get(rank, {}).values():
                flow[0] -= flow[2] * dt
        self._since[rank] = self.now

    def _settle(self) -> None:
        """Refill the ranks whose flow set changed: one link's max-min with rate caps."""
        for rank in sorted(self._dirty):
            self._refill(rank)
        self._dirty.clear()

    def _refill(self, rank: int) -> None:
        self.recomputes += 1
        flows = self._flows.get(rank)
        stamp = self._version.get(rank, 0) + 1
        self._version[rank] = stamp
        if not flows:
            self._flows.pop(rank, None)
            return
        left_capacity, left_flows = self.capacity, len(flows)
        for flow in sorted(flows.values(), key=lambda f: f[1]):  # the lowest caps first
            share = left_capacity / left_flows
            flow[2] = min(flow[1], share)
            left_capacity -= flow[2]
            left_flows -= 1
        soonest = min(max(f[0], 0.0) / f[2] if f[2] > 0 else math.inf for f in flows.values())
        if soonest < math.inf:  # (a flow capped at 0 b/s never ends: the run's stall says so)
            heapq.heappush(self._heap, (self.now + soonest, rank, stamp))
