"""UDP source ports of queue pairs: one stable port per (src rank, dst rank, qp index).

ECMP switches hash the 5-tuple, so different ports give different paths; RoCEv2 uses the source
port for exactly that entropy (IBTA RoCEv2 annex A17.3.3; Linux rdma_get_udp_sport() folds the
flow label into 0xC000..0xFFFF). On a NIC the port follows from the QP numbers, which differ from
one run to the next; here a seed (the scenario's `run.seed`) stands for that draw: seed 0 is the
plain hash, any other seed salts it, so each seed is another placement of the flows on the paths.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable


class HashSports:
    """Port = min + crc32("[seed:]src:dst:qp") mod range: independent of the order QPs are
    created. (A salt in the text, not crc32's start value: CRC is linear, so another start value
    would XOR every digest of one length with the same constant instead of drawing anew.)"""

    def __init__(self, low: int, high: int, seed: int = 0) -> None:
        self.low, self.span = low, high - low + 1
        self.salt = f"{seed}:" if seed else ""

    def __call__(self, src: int, dst: int, qp: int) -> int:
        digest = zlib.crc32(f"{self.salt}{src}:{dst}:{qp}".encode())
        return self.low + digest % self.span


class SequentialSports:
    """Each source rank hands out low + seed, low + seed + 1, ... in first-use order (wrapping):
    maximal spread."""

    def __init__(self, low: int, high: int, seed: int = 0) -> None:
        self.low, self.span = low, high - low + 1
        self.offset = seed % self.span
        self._given: dict[tuple[int, int, int], int] = {}
        self._next: dict[int, int] = {}

    def __call__(self, src: int, dst: int, qp: int) -> int:
        key = (src, dst, qp)
        port = self._given.get(key)
        if port is None:
            count = self._next.get(src, 0)
            self._next[src] = count + 1
            port = self._given[key] = self.low + (self.offset + count) % self.span
        return port


SportPolicy = Callable[[int, int, int], int]

# (low, high, seed) -> policy
SPORT_POLICIES: dict[str, Callable[[int, int, int], SportPolicy]] = {
    "hash": HashSports,
    "sequential": SequentialSports,
}
