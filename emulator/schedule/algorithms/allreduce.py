"""AllReduce: ring, halving-doubling (Rabenseifner) and direct.

Ring: reduce-scatter then all-gather around the ring, 2(n-1) steps of S/n (Patarasuk & Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009).
Halving-doubling: recursive-halving reduce-scatter then recursive-doubling all-gather (Thakur,
Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH", IJHPCA 2005);
for n not a power of two, the first 2r ranks (r = n - 2^floor(log2 n)) pair up first: even ones
send their whole buffer to the odd neighbour and get the result back at the end (same paper, 4.1).
Direct: every rank sends block j to rank j (reduce-scatter), then its reduced block to all peers.
"""

from __future__ import annotations

from emulator.schedule.algorithms.blocks import TransferList, after, split_even
from emulator.schedule.plan import Transfer


def ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    out = TransferList()
    if n < 2:
        return out.items
    blocks = split_even(size_bytes, n)
    received: list[int | None] = [None] * n
    for step in range(2 * (n - 1)):
        # Reduce-scatter sends block p-s; all-gather (t = s-(n-1)) sends block p+1-t, the one
        # just completed or received: both equal (p - s) mod n with the phase shift folded in.
        nxt: list[int | None] = [None] * n
        for p in range(n):
            block = (p - step) % n if step < n - 1 else (p + 1 - (step - (n - 1))) % n
            dst = (p + 1) % n
            nxt[dst] = out.add(step, p, dst, blocks[block], after(received[p]))
        received = nxt
    return out.items


def _pof2_floor(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def halving_doubling(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    out = TransferList()
    if n < 2:
        return out.items
    pof2 = _pof2_floor(n)
    extra = n - pof2
    received: list[list[int]] = [[] for _ in range(n)]
    step = 0
    if extra:
        for i in range(extra):
            received[2 * i + 1].append(out.add(step, 2 * i, 2 * i + 1, size_bytes))
        step += 1
    # Virtual rank v of the power-of-two phase -> group position.
    position = [2 * v + 1 for v in range(extra)] + list(range(2 * extra, n))
    blocks = split_even(size_bytes, pof2)
    prefix = [0]
    for b in blocks:
        prefix.append(prefix[-1] + b)

    def span(lo: int, hi: int) -> int:
        return prefix[hi] - prefix[lo]

    lo = [0] * pof2
    hi = [pof2] * pof2
    mask = pof2 >> 1
    while mask:  # recursive halving reduce-scatter
        deps = [tuple(received[position[v]]) for v in range(pof2)]
        new_received: list[list[int]] = [[] for _ in range(n)]
        new_lo, new_hi = lo[:], hi[:]
        for v in range(pof2):
            partner = v ^ mask
            mid = (lo[v] + hi[v]) // 2
            if v & mask:  # keep the upper half, send the lower one
                send, new_lo[v] = (lo[v], mid), mid
            else:
                send, new_hi[v] = (mid, hi[v]), mid
            index = out.add(step, position[v], position[partner], span(*send), deps[v])
            new_received[position[partner]].append(index)
        lo, hi = new_lo, new_hi
        received = _keep_outside(received, new_received, position)
        step += 1
        mask >>= 1
    mask = 1
    while mask < pof2:  # recursive doubling all-gather
        deps = [tuple(received[position[v]]) for v in range(pof2)]
        new_received = [[] for _ in range(n)]
        new_lo, new_hi = lo[:], hi[:]
        for v in range(pof2):
            partner = v ^ mask
            index = out.add(step, position[v], position[partner], span(lo[v], hi[v]), deps[v])
            new_received[position[partner]].append(index)
            new_lo[partner] = min(lo[partner], lo[v])
            new_hi[partner] = max(hi[partner], hi[v])
        lo, hi = new_lo, new_hi
        received = _keep_outside(received, new_received, position)
        step += 1
        mask <<= 1
    for i in range(extra):
        out.add(step, 2 * i + 1, 2 * i, size_bytes, tuple(received[2 * i + 1]))
    return out.items


def _keep_outside(
    old: list[list[int]], new: list[list[int]], position: list[int]
) -> list[list[int]]:
    """Receipts of the power-of-two members are replaced each step; others keep theirs."""
    members = set(position)
    return [new[p] if p in members else old[p] for p in range(len(old))]


def direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del root, parameter
    out = TransferList()
    if n < 2:
        return out.items
    blocks = split_even(size_bytes, n)
    received: list[list[int]] = [[] for _ in range(n)]
    for p in range(n):
        for j in range(n):
            if j != p:
                received[j].append(out.add(0, p, j, blocks[j]))
    for p in range(n):
        deps = tuple(received[p])
        for j in range(n):
            if j != p:
                out.add(1, p, j, blocks[p], deps)
    return out.items
