"""AllGather and ReduceScatter: ring (n-1 steps of one block) and direct (one step to all peers).

S is the whole buffer (AllGather: the gathered output; ReduceScatter: the input), split into n
blocks; position p owns block p (its AllGather input, or its ReduceScatter result).
"""

from __future__ import annotations

from emulator.schedule.algorithms.blocks import TransferList, after, split_even
from emulator.schedule.plan import Transfer


def _ring(n: int, size_bytes: int, shift: int) -> list[Transfer]:
    out = TransferList()
    if n < 2:
        return out.items
    blocks = split_even(size_bytes, n)
    received: list[int | None] = [None] * n
    for step in range(n - 1):
        nxt: list[int | None] = [None] * n
        for p in range(n):
            dst = (p + 1) % n
            block = (p - step - shift) % n
            nxt[dst] = out.add(step, p, dst, blocks[block], after(received[p]))
        received = nxt
    return out.items


def allgather_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    """Step s: p forwards block p-s (its own at s=0, then the one it just received)."""
    del root, parameter
    return _ring(n, size_bytes, 0)


def reducescatter_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    """Step s: p sends its partial of block p-s-1, so p ends holding block p fully reduced."""
    del root, parameter
    return _ring(n, size_bytes, 1)


def allgather_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    out = TransferList()
    blocks = split_even(size_bytes, n) if n else []
    for p in range(n):
        for j in range(n):
            if j != p:
                out.add(0, p, j, blocks[p])
    return out.items


def reducescatter_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    out = TransferList()
    blocks = split_even(size_bytes, n) if n else []
    for p in range(n):
        for j in range(n):
            if j != p:
                out.add(0, p, j, blocks[j])
    return out.items
