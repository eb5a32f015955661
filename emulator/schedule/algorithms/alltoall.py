"""AllToAll: S is the send buffer of each rank, block j of it goes to peer j.

parallel: every rank sends to every peer at once. paced: rank p sends to p+1, p+2, ... and starts
the o-th peer only when the (o-k)-th has arrived, so at most k peers are in flight (parameter k).
"""

from __future__ import annotations

from emulator.schedule.algorithms.blocks import TransferList, split_even
from emulator.schedule.plan import Transfer


def parallel(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    return paced(n, size_bytes, 0, n)


def paced(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root
    in_flight = max(1, parameter)
    out = TransferList()
    if n < 2:
        return out.items
    blocks = split_even(size_bytes, n)
    for p in range(n):
        sent: list[int] = []
        for offset in range(1, n):
            dst = (p + offset) % n
            deps = (sent[offset - 1 - in_flight],) if offset - 1 >= in_flight else ()
            sent.append(out.add((offset - 1) // in_flight, p, dst, blocks[dst], deps))
    return out.items
