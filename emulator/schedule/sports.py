"""UDP source ports of queue pairs: one stable port per (src rank, dst rank, qp index).

ECMP switches hash the 5-tuple, so different ports give different paths; RoCEv2 uses the source
port for exactly that entropy (IBTA RoCEv2 annex A17.3.3; Linux rdma_get_udp_sport() folds the
flow label into 0xC000..0xFFFF). On a NIC the port follows from the QP numbers, which differ from
one run to the next; here a seed (the scenario's `run.seed`) stands for that draw: seed 0 is the
plain hash, any other seed salts it, so each seed is another placement of the flows on the paths.

`balanced` is the host-side answer to ECMP collisions of a few long flows: knowing the fabric's
hash (fabrics/ecmp.py predicts the kernel's, and the simulator shares it), pick each queue pair's
port among several draws so that its path is the least loaded by the queue pairs placed before
it. Production AI fabrics do the same with other tools: Meta's RoCE training fabric moved from
ECMP to centralised traffic engineering that places flows on paths, and E-ECMP with more QPs per
peer (Gangidi et al., "RDMA over Ethernet for Distributed AI Training at Meta Scale", SIGCOMM
2024, section 5); NVIDIA Spectrum-X sprays packets (adaptive routing). With it a collective whose
flows could fill every uplink alone does, which the plain hash rarely allows.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable

from emulator.errors import InputError
from emulator.schedule.fluid import PathFn


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


class BalancedSports:
    """Each new queue pair takes, of CANDIDATES hashed draws, the port whose path through the
    fabric has the lowest peak load (queue pairs already on a link / its rate), then the lowest
    total; ties go to the earlier draw. Queue pairs are placed in first-use order, so a run's
    flows get the same ports in every iteration; the seed salts the draws (another, equally
    balanced placement). Counting queue pairs, not bytes: the schedule does not know a QP's
    volume when it opens it, and the collectives that collide (ring neighbours, All-to-All
    peers) give each of their QPs the same share."""

    # A given one of moe_mix's 32 leaf-to-leaf paths (8 uplinks x 4 spine downlinks) is among
    # 256 draws with probability 1 - (31/32)^256 > 0.9997.
    CANDIDATES = 256

    def __init__(self, low: int, high: int, seed: int = 0, path: PathFn | None = None) -> None:
        if path is None:
            raise InputError(
                "collectives.sport_policy: balanced needs the fabric's paths (a Clos or DUT "
                "fabric in the scenario)"
            )
        self.draws = HashSports(low, high, seed)
        self.path = path
        self.load: dict[Hashable, int] = {}
        self._given: dict[tuple[int, int, int], int] = {}

    def __call__(self, src: int, dst: int, qp: int) -> int:
        key = (src, dst, qp)
        port = self._given.get(key)
        if port is not None:
            return port
        best: tuple[float, float] | None = None
        best_port = 0
        best_links: tuple[tuple[Hashable, float], ...] = ()
        for k in range(self.CANDIDATES):
            candidate = self.draws(src, dst, qp * self.CANDIDATES + k)
            links = tuple(self.path(src, dst, candidate))
            loads = [(self.load.get(link, 0) + 1) / rate for link, rate in links]
            cost = (max(loads, default=0.0), sum(loads))
            if best is None or cost < best:
                best, best_port, best_links = cost, candidate, links
            # Every path of a pair starts and ends on the same host links; a path whose other
            # links carry nothing yet cannot be beaten (and a pair under one leaf has one path).
            if all(self.load.get(link, 0) == 0 for link, _rate in links[1:-1]):
                break
        for link, _rate in best_links:
            self.load[link] = self.load.get(link, 0) + 1
        self._given[key] = best_port
        return best_port


SportPolicy = Callable[[int, int, int], int]


def _hash(low: int, high: int, seed: int, path: PathFn | None) -> SportPolicy:
    return HashSports(low, high, seed)


def _sequential(low: int, high: int, seed: int, path: PathFn | None) -> SportPolicy:
    return SequentialSports(low, high, seed)


# (low, high, seed, the fabric's path function or None) -> policy
SPORT_POLICIES: dict[str, Callable[[int, int, int, PathFn | None], SportPolicy]] = {
    "hash": _hash,
    "sequential": _sequential,
    "balanced": BalancedSports,
}
