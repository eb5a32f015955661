"""Max-min fair fluid network: flows share link rates, recomputed only when the flow set changes.

Flows with the same path (sequence of links) always get the same max-min rate, so they are kept
in one path class with a shared "service" counter (bytes delivered to each member since the
class was created); a flow finishes when the service reaches its start offset plus its bytes.
Progressive filling (Bertsekas & Gallager, Data Networks, 6.5.2) runs over classes weighted by
their member counts: the links whose fair share (capacity left / members left) is the smallest
fix the rate of every class crossing them, which leaves the others' shares to fill.

The classes, links and their incidence are numpy arrays, so a recompute costs a few vector passes
per bottleneck level instead of a Python loop over every link per class fixed: planning a
1,024-rank MoE step has ~10^5 classes over ~10^4 links. A class keeps its index for its life and
indices only grow (compacted in order when most are dead), so classes are visited in the order
they were made, as a dict of them would be.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from emulator.native.fill import NativeFill

PathFn = Callable[[int, int, int], Sequence[tuple[Hashable, float]]]
"""(src rank, dst rank, UDP source port) -> the links the flow crosses as (link id, rate in bit/s)."""

_REL_EPS = 1e-9
_TIME_EPS = 1e-12
_MIN_SHARE = 1e-9  # bytes/s: a link with nothing left still lets its classes crawl
_TIE = 1e-12  # links whose share is within this relative distance of the smallest tie with it


class FluidNetwork:
    def __init__(self, path: PathFn, native: bool = True) -> None:
        self.path = path
        # the levels in C when emulator.native._fill is built (the same rates, bit for bit)
        self._native = NativeFill.load() if native else None
        self._link_index: dict[Hashable, int] = {}
        self._capacity = np.zeros(64)  # link index -> bytes/s
        self._paths: dict[tuple[int, int, int], tuple[Hashable, ...]] = {}
        self._class_of: dict[tuple[Hashable, ...], int] = {}  # path -> live class index
        self._keys: list[tuple[Hashable, ...]] = []  # class -> its path
        self._heaps: list[list[tuple[float, int]]] = []  # class -> (service at finish, flow id)
        self._links_of: list[np.ndarray] = []  # class -> its link indexes
        self._service = np.zeros(64)  # bytes delivered to each member since the class was made
        self._rate = np.zeros(64)  # bytes/s per member
        self._head = np.full(64, math.inf)  # the service at which its first member finishes
        self._members = np.zeros(64)
        self._alive = np.zeros(64, dtype=bool)
        self._classes = 0  # indexes used so far
        self._inc_class = np.zeros(0, dtype=np.int64)  # incidence: class index ...
        self._inc_link = np.zeros(0, dtype=np.int64)  # ... crosses link index
        self._inc_pending: list[int] = []  # classes made since the incidence was built
        self._instant: list[int] = []  # flows with an empty path: done at once
        self._dirty = False
        self.now = 0.0
        self.recomputes = 0

    @property
    def active(self) -> int:
        return sum(len(self._heaps[c]) for c in self._class_of.values()) + len(self._instant)

    def links_of(self, src: int, dst: int, sport: int) -> tuple[Hashable, ...]:
        key = (src, dst, sport)
        links = self._paths.get(key)
        if links is None:
            hops = self.path(src, dst, sport)
            for link, rate_bps in hops:
                if rate_bps <= 0:
                    raise ValueError(f"link {link!r} has rate {rate_bps} bit/s")
                self._link(link, rate_bps)
            links = self._paths[key] = tuple(link for link, _ in hops)
        return links

    def _link(self, link: Hashable, rate_bps: float) -> int:
        index = self._link_index.get(link)
        if index is None:
            index = self._link_index[link] = len(self._link_index)
            if index >= len(self._capacity):
                self._capacity = np.concatenate([self._capacity, np.zeros(len(self._capacity))])
            self._capacity[index] = rate_bps / 8.0
        return index

    def add(
        self,
        flow_id: int,
        src: int,
        dst: int,
        sport: int,
        nbytes: int,
        max_rate_bps: float | None = None,
    ) -> None:
        """A flow of nbytes; `max_rate_bps` caps it (a sender offering less than line rate),
        modelled as a link of that rate only this flow crosses."""
        links = self.links_of(src, dst, sport)
        if links and max_rate_bps is not None:
            cap = ("rate_cap", flow_id)
            self._link(cap, max_rate_bps)
            links = (*links, cap)
        if not links or nbytes <= 0:
            self._instant.append(flow_id)
            return
        c = self._class_of.get(links)
        if c is None:
            c = self._new_class(links)
        heapq.heappush(self._heaps[c], (self._service[c] + nbytes, flow_id))
        self._head[c] = self._heaps[c][0][0]
        self._members[c] += 1
        self._dirty = True

    def _new_class(self, links: tuple[Hashable, ...]) -> int:
        if self._classes == len(self._alive):
            if self._alive[: self._classes].sum() * 2 < self._classes:
                self._compact()
            if self._classes == len(self._alive):
                self._grow()
        c = self._classes
        self._classes += 1
        self._class_of[links] = c
        self._keys.append(links)
        self._heaps.append([])
        self._links_of.append(np.fromiter((self._link_index[x] for x in links), np.int64))
        self._service[c] = self._rate[c] = self._members[c] = 0.0
        self._head[c] = math.inf
        self._alive[c] = True
        self._inc_pending.append(c)
        return c

    def _grow(self) -> None:
        n = len(self._alive)
        self._service = np.concatenate([self._service, np.zeros(n)])
        self._rate = np.concatenate([self._rate, np.zeros(n)])
        self._head = np.concatenate([self._head, np.full(n, math.inf)])
        self._members = np.concatenate([self._members, np.zeros(n)])
        self._alive = np.concatenate([self._alive, np.zeros(n, dtype=bool)])

    def _compact(self) -> None:
        """Renumber the live classes 0..k-1 in their order; the dead ones go."""
        live = np.flatnonzero(self._alive[: self._classes])
        new_of = np.full(self._classes, -1, dtype=np.int64)
        new_of[live] = np.arange(len(live))
        for array in ("_service", "_rate", "_head", "_members", "_alive"):
            old = getattr(self, array)
            moved = np.zeros_like(old) if array != "_head" else np.full_like(old, math.inf)
            moved[: len(live)] = old[live]
            setattr(self, array, moved)
        self._keys = [self._keys[c] for c in live]
        self._heaps = [self._heaps[c] for c in live]
        self._links_of = [self._links_of[c] for c in live]
        self._class_of = {key: int(new_of[c]) for key, c in self._class_of.items()}
        keep = self._alive_incidence(new_of)
        self._inc_class = new_of[self._inc_class[keep]]
        self._inc_link = self._inc_link[keep]
        self._inc_pending = [int(new_of[c]) for c in self._inc_pending if new_of[c] >= 0]
        self._classes = len(live)

    def _alive_incidence(self, new_of: np.ndarray) -> np.ndarray:
        return new_of[self._inc_class] >= 0 if len(self._inc_class) else np.zeros(0, dtype=bool)

    def _live(self) -> np.ndarray:
        return np.flatnonzero(self._alive[: self._classes])

    def next_completion(self) -> float:
        """Absolute time of the next flow completion (inf when nothing is active)."""
        if not self._class_of and not self._instant:
            return math.inf
        if self._instant:
            return self.now
        if self._dirty:
            self._recompute()
        live = self._live()
        best = float(np.min((self._head[live] - self._service[live]) / self._rate[live]))
        return self.now + max(best, 0.0)

    def advance(self, t: float) -> list[int]:
        """Move the clock to t and return the flows completed by then (in completion order)."""
        if not self._class_of and not self._instant:
            self.now = t
            return []
        if self._dirty:
            self._recompute()
        dt = t - self.now
        self.now = t
        done, self._instant = self._instant, []
        live = self._live()
        service = self._service
        service[live] += self._rate[live] * dt
        # Done within float noise: a byte fraction, or a time step below clock resolution.
        slack = self._rate[live] * _TIME_EPS * max(1.0, t)
        left = self._head[live] - service[live]
        is_due = left <= np.maximum(slack, _REL_EPS * self._head[live])
        # in the order the classes were made
        for c, limit in zip(live[is_due].tolist(), slack[is_due].tolist(), strict=True):
            heap = self._heaps[c]
            while heap and heap[0][0] - service[c] <= max(limit, _REL_EPS * heap[0][0]):
                done.append(heapq.heappop(heap)[1])
                self._members[c] -= 1
            if heap:
                self._head[c] = heap[0][0]
            else:
                self._retire(c)
        if done:
            self._dirty = True
        return done

    def _retire(self, c: int) -> None:
        """An emptied class: a new flow on its path starts a new one (service from 0)."""
        del self._class_of[self._keys[c]]
        self._alive[c] = False
        self._head[c] = math.inf
        self._members[c] = 0.0

    def _recompute(self) -> None:
        """Progressive filling over path classes."""
        self._dirty = False
        self.recomputes += 1
        self._fill()

    def _fill(self) -> None:
        """Progressive filling in numpy, one bottleneck level per pass."""
        if self._inc_pending:
            fresh = self._inc_pending
            self._inc_class = np.concatenate(
                [self._inc_class, np.repeat(fresh, [len(self._links_of[c]) for c in fresh])]
            )
            self._inc_link = np.concatenate([self._inc_link, *(self._links_of[c] for c in fresh)])
            self._inc_pending = []
        alive = self._alive[self._inc_class]
        if not alive.all():  # retired classes leave the incidence for good
            self._inc_class, self._inc_link = self._inc_class[alive], self._inc_link[alive]
        inc_class, inc_link = self._inc_class, self._inc_link
        links = len(self._link_index)
        weight = self._members[inc_class]
        if self._native is not None:
            fixed = (~self._alive[: self._classes]).view(np.uint8).copy()
            self._native.fill(
                inc_class,
                inc_link,
                weight,
                self._capacity[:links],
                fixed,
                self._rate,
                tie=_TIE,
                min_share=_MIN_SHARE,
            )
            return
        self._fill_numpy(inc_class, inc_link, weight, links)

    def _fill_numpy(
        self, inc_class: np.ndarray, inc_link: np.ndarray, weight: np.ndarray, links: int
    ) -> None:
        """The levels in numpy (the fallback of emulator.native._fill, and its reference)."""
        remaining = self._capacity[:links].copy()
        count = np.bincount(inc_link, weights=weight, minlength=links)
        fixed = ~self._alive[: self._classes].copy()
        while True:
            open_links = count > 0.5  # member counts are whole numbers
            if not open_links.any():
                break
            share = np.full(links, math.inf)
            share[open_links] = remaining[open_links] / count[open_links]
            level = float(share.min())
            bottleneck = share <= level + abs(level) * _TIE
            newly = np.zeros(len(fixed), dtype=bool)
            newly[inc_class[bottleneck[inc_link]]] = True
            newly &= ~fixed
            rate = max(level, _MIN_SHARE)
            self._rate[: len(fixed)][newly] = rate
            fixed |= newly
            gone = newly[inc_class]
            remaining -= np.bincount(inc_link[gone], weights=rate * weight[gone], minlength=links)
            count -= np.bincount(inc_link[gone], weights=weight[gone], minlength=links)
            # the links of the level are settled even if float noise left them a member
            count[bottleneck] = 0.0
            keep = ~gone
            inc_class, inc_link, weight = inc_class[keep], inc_link[keep], weight[keep]
