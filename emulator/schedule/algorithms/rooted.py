"""Rooted collectives: Broadcast, Reduce, Gather, Scatter as ring (chain), binary tree, direct.

Positions are taken relative to the root (rel = (p - root) mod n). Broadcast and Reduce move the
whole S on every edge; Gather and Scatter move the blocks of the ranks behind the edge (S is the
root's whole buffer, block p belongs to position p). Chunking pipelines the chains and trees.
"""

from __future__ import annotations

from emulator.schedule.algorithms.blocks import TransferList, after, split_even
from emulator.schedule.plan import Transfer


def _abs(rel: int, root: int, n: int) -> int:
    return (rel + root) % n


def _children(rel: int, n: int) -> list[int]:
    return [c for c in (2 * rel + 1, 2 * rel + 2) if c < n]


def _depth(rel: int) -> int:
    return (rel + 1).bit_length() - 1


def _subtree(rel: int, n: int) -> list[int]:
    todo, out = [rel], []
    while todo:
        node = todo.pop()
        out.append(node)
        todo.extend(_children(node, n))
    return out


def _outward_chain(n: int, root: int, sizes: list[int]) -> list[Transfer]:
    """Root -> rel 1 -> ... -> rel n-1; sizes[i] bytes go into rel i+1."""
    out = TransferList()
    previous: int | None = None
    for i in range(n - 1):
        previous = out.add(i, _abs(i, root, n), _abs(i + 1, root, n), sizes[i], after(previous))
    return out.items


def _inward_chain(n: int, root: int, sizes: list[int]) -> list[Transfer]:
    """rel 1 -> rel 2 -> ... -> rel n-1 -> root; sizes[i] bytes leave rel i+1."""
    out = TransferList()
    previous: int | None = None
    for i in range(n - 1):
        src, dst = _abs(i + 1, root, n), _abs((i + 2) % n, root, n)
        previous = out.add(i, src, dst, sizes[i], after(previous))
    return out.items


def _outward_tree(n: int, root: int, size_of: list[int]) -> list[Transfer]:
    """Parent -> child carrying size_of[child rel] bytes, after the parent received its part."""
    out = TransferList()
    into: dict[int, int] = {}
    for rel in range(1, n):  # parents (lower rel) come first
        parent = (rel - 1) // 2
        deps = after(into.get(parent))
        into[rel] = out.add(
            _depth(rel) - 1, _abs(parent, root, n), _abs(rel, root, n), size_of[rel], deps
        )
    return out.items


def _inward_tree(n: int, root: int, size_of: list[int]) -> list[Transfer]:
    """Child -> parent carrying size_of[child rel] bytes, after all its own children arrived."""
    out = TransferList()
    into: dict[int, list[int]] = {}
    max_depth = _depth(n - 1)
    for rel in range(n - 1, 0, -1):  # children (higher rel) come first
        parent = (rel - 1) // 2
        index = out.add(
            max_depth - _depth(rel),
            _abs(rel, root, n),
            _abs(parent, root, n),
            size_of[rel],
            tuple(into.get(rel, ())),
        )
        into.setdefault(parent, []).append(index)
    return out.items


def _direct_out(n: int, root: int, size_of: list[int]) -> list[Transfer]:
    out = TransferList()
    for rel in range(1, n):
        out.add(0, root, _abs(rel, root, n), size_of[rel])
    return out.items


def _direct_in(n: int, root: int, size_of: list[int]) -> list[Transfer]:
    out = TransferList()
    for rel in range(1, n):
        out.add(0, _abs(rel, root, n), root, size_of[rel])
    return out.items


def _rel_blocks(n: int, root: int, size_bytes: int) -> list[int]:
    """Block size per rel position (blocks are indexed by absolute position)."""
    blocks = split_even(size_bytes, n)
    return [blocks[_abs(rel, root, n)] for rel in range(n)]


def broadcast_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _outward_chain(n, root, [size_bytes] * max(0, n - 1))


def broadcast_tree(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _outward_tree(n, root, [size_bytes] * n)


def broadcast_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _direct_out(n, root, [size_bytes] * n)


def reduce_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _inward_chain(n, root, [size_bytes] * max(0, n - 1))


def reduce_tree(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _inward_tree(n, root, [size_bytes] * n)


def reduce_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _direct_in(n, root, [size_bytes] * n)


def gather_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    """rel i forwards the blocks of rel 1..i toward the root."""
    del parameter
    rel_blocks = _rel_blocks(n, root, size_bytes)
    sizes, total = [], 0
    for i in range(1, n):
        total += rel_blocks[i]
        sizes.append(total)
    return _inward_chain(n, root, sizes)


def gather_tree(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    rel_blocks = _rel_blocks(n, root, size_bytes)
    size_of = [sum(rel_blocks[r] for r in _subtree(rel, n)) for rel in range(n)]
    return _inward_tree(n, root, size_of)


def gather_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _direct_in(n, root, _rel_blocks(n, root, size_bytes))


def scatter_ring(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    """The transfer into rel i carries the blocks of rel i..n-1."""
    del parameter
    rel_blocks = _rel_blocks(n, root, size_bytes)
    sizes = [sum(rel_blocks[i:]) for i in range(1, n)]
    return _outward_chain(n, root, sizes)


def scatter_tree(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    rel_blocks = _rel_blocks(n, root, size_bytes)
    size_of = [sum(rel_blocks[r] for r in _subtree(rel, n)) for rel in range(n)]
    return _outward_tree(n, root, size_of)


def scatter_direct(n: int, size_bytes: int, root: int, parameter: int) -> list[Transfer]:
    del parameter
    return _direct_out(n, root, _rel_blocks(n, root, size_bytes))
