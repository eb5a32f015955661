"""Deterministic split of a buffer into n blocks whose sizes differ by at most one byte."""

from __future__ import annotations

from emulator.schedule.plan import Transfer


def split_even(size_bytes: int, parts: int) -> list[int]:
    """Sizes of `parts` blocks summing exactly to size_bytes; the first size % parts get one more."""
    base, extra = divmod(size_bytes, parts)
    return [base + 1 if k < extra else base for k in range(parts)]


class TransferList:
    """Accumulates transfers and hands out their indices for later deps."""

    def __init__(self) -> None:
        self.items: list[Transfer] = []

    def add(self, step: int, src: int, dst: int, nbytes: int, deps: tuple[int, ...] = ()) -> int:
        self.items.append(Transfer(step, src, dst, nbytes, deps))
        return len(self.items) - 1


def after(index: int | None) -> tuple[int, ...]:
    return () if index is None else (index,)
