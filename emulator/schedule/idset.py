"""A set of node ids that costs one bit per id for the usual dense ids (sets for the rest)."""

from __future__ import annotations

_BITMAP_LIMIT = 1 << 27  # ids below this live in the bitmap (at most 16 MiB)


class IdSet:
    __slots__ = ("_bits", "_others")

    def __init__(self) -> None:
        self._bits = bytearray()
        self._others: set[int] = set()

    def add(self, node_id: int) -> None:
        if 0 <= node_id < _BITMAP_LIMIT:
            byte = node_id >> 3
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            self._bits[byte] |= 1 << (node_id & 7)
        else:
            self._others.add(node_id)

    def __contains__(self, node_id: int) -> bool:
        if 0 <= node_id < _BITMAP_LIMIT:
            byte = node_id >> 3
            return byte < len(self._bits) and bool(self._bits[byte] & (1 << (node_id & 7)))
        return node_id in self._others

    def nbytes(self) -> int:
        return len(self._bits) + 64 * len(self._others)
