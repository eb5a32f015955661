"""Barrier: dissemination algorithm, ceil(log2 n) rounds; in round k rank p messages p + 2^k.

Hensgen, Finkel & Manber, "Two algorithms for barrier synchronization", IJPP 1988. The
parameter is the message payload in bytes.
"""

from __future__ import annotations

from emulator.schedule.algorithms.blocks import TransferList, after
from emulator.schedule.plan import Transfer


def dissemination(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del size_bytes, root
    out = TransferList()
    received: list[int | None] = [None] * n
    distance, step = 1, 0
    while distance < n:
        nxt: list[int | None] = [None] * n
        for p in range(n):
            dst = (p + distance) % n
            nxt[dst] = out.add(step, p, dst, parameter, after(received[p]))
        received = nxt
        distance, step = distance * 2, step + 1
    return out.items
