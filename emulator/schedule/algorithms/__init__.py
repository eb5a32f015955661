"""Collective algorithms: each turns (group size n, size S, root) into logical transfers.

An algorithm works on group positions 0..n-1 and returns Transfers whose deps say which earlier
transfer's data each one forwards; emulator.schedule.collectives maps positions to ranks and
splits transfers into chunks and queue pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from emulator.schedule.algorithms import allreduce, alltoall, barrier, ring_direct, rooted
from emulator.schedule.plan import Transfer

Algorithm = Callable[[int, int, int, int], list[Transfer]]
"""(n, size_bytes, root position, parameter) -> transfers. The parameter is algorithm specific
(peers in flight for paced all-to-all, message size for barrier); others ignore it."""

# Collective type -> algorithm name -> algorithm.
ALGORITHMS: dict[str, dict[str, Algorithm]] = {
    "ALL_REDUCE": {
        "ring": allreduce.ring,
        "halving_doubling": allreduce.halving_doubling,
        "direct": allreduce.direct,
    },
    "ALL_GATHER": {"ring": ring_direct.allgather_ring, "direct": ring_direct.allgather_direct},
    "REDUCE_SCATTER": {
        "ring": ring_direct.reducescatter_ring,
        "direct": ring_direct.reducescatter_direct,
    },
    "ALL_TO_ALL": {"parallel": alltoall.parallel, "paced": alltoall.paced},
    "BROADCAST": {
        "ring": rooted.broadcast_ring,
        "tree": rooted.broadcast_tree,
        "direct": rooted.broadcast_direct,
    },
    "REDUCE": {
        "ring": rooted.reduce_ring,
        "tree": rooted.reduce_tree,
        "direct": rooted.reduce_direct,
    },
    "GATHER": {
        "ring": rooted.gather_ring,
        "tree": rooted.gather_tree,
        "direct": rooted.gather_direct,
    },
    "SCATTER": {
        "ring": rooted.scatter_ring,
        "tree": rooted.scatter_tree,
        "direct": rooted.scatter_direct,
    },
    "BARRIER": {"dissemination": barrier.dissemination},
}

# Chakra types that use another type's algorithms (REDUCE_SCATTER_BLOCK is a ReduceScatter with
# equal blocks, which the even block split already gives).
ALIASES: dict[str, str] = {"REDUCE_SCATTER_BLOCK": "REDUCE_SCATTER"}


def algorithm_family(collective: str) -> str:
    return ALIASES.get(collective, collective)


def check_algorithm_names(algorithms: Mapping[str, str]) -> str | None:
    """Why this collective -> algorithm mapping is invalid, or None."""
    for collective, name in algorithms.items():
        known = ALGORITHMS.get(algorithm_family(collective))
        if known is None:
            return f"unknown collective type {collective!r} (known: {', '.join(ALGORITHMS)})"
        if name not in known:
            return f"{collective}: unknown algorithm {name!r} (known: {', '.join(known)})"
    return None
