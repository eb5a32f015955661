"""Max-min fair fluid network: flows share link rates, recomputed only when the flow set changes.

Flows with the same path (sequence of links) always get the same max-min rate, so they are kept
in one path class with a shared "service" counter (bytes delivered to each member since the
class was created); a flow finishes when the service reaches its start offset plus its bytes.
Progressive filling (Bertsekas & Gallager, Data Networks, 6.5.2) runs over classes weighted by
their member counts.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence

PathFn = Callable[[int, int, int], Sequence[tuple[Hashable, float]]]
"""(src rank, dst rank, UDP source port) -> the links the flow crosses as (link id, rate in bit/s)."""

_REL_EPS = 1e-9
_TIME_EPS = 1e-12


class _PathClass:
    __slots__ = ("heap", "links", "rate", "service")

    def __init__(self, links: tuple[Hashable, ...]) -> None:
        self.links = links
        self.rate = 0.0  # bytes/s per member
        self.service = 0.0  # bytes delivered to each member since creation
        self.heap: list[tuple[float, int]] = []  # (service at which the member finishes, flow id)


class FluidNetwork:
    def __init__(self, path: PathFn) -> None:
        self.path = path
        self.capacity: dict[Hashable, float] = {}  # link -> bytes/s
        self._paths: dict[tuple[int, int, int], tuple[Hashable, ...]] = {}
        self._classes: dict[tuple[Hashable, ...], _PathClass] = {}
        self._on_link: dict[Hashable, dict[tuple[Hashable, ...], _PathClass]] = {}
        self._instant: list[int] = []  # flows with an empty path: done at once
        self._dirty = False
        self.now = 0.0
        self.recomputes = 0

    @property
    def active(self) -> int:
        return sum(len(c.heap) for c in self._classes.values()) + len(self._instant)

    def links_of(self, src: int, dst: int, sport: int) -> tuple[Hashable, ...]:
        key = (src, dst, sport)
        links = self._paths.get(key)
        if links is None:
            hops = self.path(src, dst, sport)
            for link, rate_bps in hops:
                if rate_bps <= 0:
                    raise ValueError(f"link {link!r} has rate {rate_bps} bit/s")
                self.capacity.setdefault(link, rate_bps / 8.0)
            links = self._paths[key] = tuple(link for link, _ in hops)
        return links

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
            self.capacity[cap] = max_rate_bps / 8.0
            links = (*links, cap)
        if not links or nbytes <= 0:
            self._instant.append(flow_id)
            return
        cls = self._classes.get(links)
        if cls is None:
            cls = self._classes[links] = _PathClass(links)
            for link in links:
                self._on_link.setdefault(link, {})[links] = cls
        heapq.heappush(cls.heap, (cls.service + nbytes, flow_id))
        self._dirty = True

    def next_completion(self) -> float:
        """Absolute time of the next flow completion (inf when nothing is active)."""
        if not self._classes and not self._instant:
            return math.inf
        if self._instant:
            return self.now
        if self._dirty:
            self._recompute()
        best = math.inf
        for cls in self._classes.values():
            t = (cls.heap[0][0] - cls.service) / cls.rate
            if t < best:
                best = t
        return self.now + max(best, 0.0)

    def advance(self, t: float) -> list[int]:
        """Move the clock to t and return the flows completed by then (in completion order)."""
        if not self._classes and not self._instant:
            self.now = t
            return []
        if self._dirty:
            self._recompute()
        dt = t - self.now
        self.now = t
        done, self._instant = self._instant, []
        emptied: list[tuple[Hashable, ...]] = []
        for key, cls in self._classes.items():
            cls.service += cls.rate * dt
            heap = cls.heap
            # Done within float noise: a byte fraction, or a time step below clock resolution.
            slack = cls.rate * _TIME_EPS * max(1.0, t)
            while heap and heap[0][0] - cls.service <= max(slack, _REL_EPS * heap[0][0]):
                done.append(heapq.heappop(heap)[1])
            if not heap:
                emptied.append(key)
        for key in emptied:
            cls = self._classes.pop(key)
            for link in cls.links:
                del self._on_link[link][key]
                if not self._on_link[link]:
                    del self._on_link[link]
                    if isinstance(link, tuple) and link[:1] == ("rate_cap",):
                        del self.capacity[link]
        if done:
            self._dirty = True
        return done

    def _recompute(self) -> None:
        """Progressive filling over path classes."""
        self._dirty = False
        self.recomputes += 1
        remaining: dict[Hashable, float] = {}
        count: dict[Hashable, int] = {}
        for link, classes in self._on_link.items():
            remaining[link] = self.capacity[link]
            count[link] = sum(len(c.heap) for c in classes.values())
        frozen: set[tuple[Hashable, ...]] = set()
        while count:
            bottleneck = min(count, key=lambda link: remaining[link] / count[link])
            share = max(remaining[bottleneck] / count[bottleneck], 1e-9)
            for key, cls in self._on_link[bottleneck].items():
                if key in frozen:
                    continue
                frozen.add(key)
                cls.rate = share
                members = len(cls.heap)
                for link in cls.links:
                    if link in count:
                        remaining[link] -= share * members
                        count[link] -= members
                        if count[link] <= 0:
                            del count[link]
            count.pop(bottleneck, None)
