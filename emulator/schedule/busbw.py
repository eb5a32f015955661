"""Algorithm and bus bandwidth of a collective, as nccl-tests defines them.

algbw = S / t, with S the per-rank size of the collective as Chakra's comm_size gives it (the
whole buffer for AllGather/ReduceScatter/AllToAll, i.e. n times the per-rank share).
busbw = algbw x factor, the factor making busbw comparable to the link rate:
2(n-1)/n for AllReduce; (n-1)/n for AllGather, ReduceScatter, AllToAll, Gather, Scatter;
1 for Broadcast, Reduce and SendRecv.
Source: NVIDIA/nccl-tests doc/PERFORMANCE.md and src/*.cu (*GetBw functions).
"""

from __future__ import annotations

from collections.abc import Callable


def _allreduce(n: int) -> float:
    return 2.0 * (n - 1) / n


def _n_minus_one_over_n(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    del n
    return 1.0


# Collective type name (Chakra CollectiveCommType, plus SEND_RECV) -> busbw factor of group size n.
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "ALL_REDUCE": _allreduce,
    "ALL_GATHER": _n_minus_one_over_n,
    "REDUCE_SCATTER": _n_minus_one_over_n,
    "REDUCE_SCATTER_BLOCK": _n_minus_one_over_n,
    "ALL_TO_ALL": _n_minus_one_over_n,
    "GATHER": _n_minus_one_over_n,
    "SCATTER": _n_minus_one_over_n,
    "BROADCAST": _one,
    "REDUCE": _one,
    "SEND_RECV": _one,
}


def busbw_factor(collective: str, group_size: int) -> float | None:
    """The nccl-tests factor, or None where nccl-tests defines none (BARRIER) or n < 1."""
    factor = BUSBW_FACTORS.get(collective)
    if factor is None or group_size < 1:
        return None
    return factor(group_size)


def algbw_bytes_per_s(size_bytes: int, time_s: float) -> float | None:
    """S / t; None when the time is zero (nothing crossed the network, e.g. a 1-rank group)."""
    if time_s <= 0.0:
        return None
    return size_bytes / time_s


def busbw_bytes_per_s(
    collective: str, group_size: int, size_bytes: int, time_s: float
) -> float | None:
    """algbw x factor; None when either is undefined."""
    algbw = algbw_bytes_per_s(size_bytes, time_s)
    factor = busbw_factor(collective, group_size)
    if algbw is None or factor is None:
        return None
    return algbw * factor
