"""Which training iteration a collective instance belongs to.

A replay pass of the trace may hold several training steps (a generated MoE trace has ten).
Chakra marks no step boundaries, so the step is inferred from repetition: within a pass, the
k-th instance of a (collective type, process group) is in step floor(k x S / n), where n is how
often that pair occurs in a pass and S the least such count over all pairs. In the MoE trace the
All-Reduce occurs 10 times per group and the All-to-All 20 (dispatch and combine): both map to
steps 0-9. A trace whose collectives each occur once per pass gets one step per pass. Matching
pairs the k-th collective of a process group across ranks, so k is the same in every run.

A generated trace knows its steps (`workload.generate.iterations`): that count is used instead of
the least occurrence, so the same steps get the same numbers whichever collectives a variant
keeps (the All-to-All-only MoE trace has 20 All-to-Alls per group and still 10 steps).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from emulator.schedule.plan import CollectiveInstance

Pair = tuple[str, str]


class IterationNumbering:
    def __init__(
        self, plan: Iterable[CollectiveInstance], steps_per_pass: int | None = None
    ) -> None:
        """`plan`: every instance of the run (the ideal-time model's), to count occurrences;
        `steps_per_pass`: the training steps in one pass, where the trace's writer knows them."""
        per_pass: Counter[tuple[int, str, str]] = Counter()
        for inst in plan:
            per_pass[(inst.iteration, inst.collective, inst.group)] += 1
        self.occurrences: dict[Pair, int] = {}
        for (_, collective, group), n in per_pass.items():
            pair = (collective, group)
            self.occurrences[pair] = max(self.occurrences.get(pair, 0), n)
        least = min(self.occurrences.values(), default=1)
        self.steps_per_pass = steps_per_pass if steps_per_pass else least
        self.passes = 1 + max((key[0] for key in per_pass), default=0)
        self._seen: Counter[tuple[int, str, str]] = Counter()

    @property
    def total(self) -> int:
        return self.passes * self.steps_per_pass

    def restart(self) -> None:
        """A new replay of the same plan (auto TDF's probe, then the run) numbers from 0."""
        self._seen.clear()

    def number(self, inst: CollectiveInstance) -> int:
        """The instance's iteration; call once per instance, in matching order."""
        key = (inst.iteration, inst.collective, inst.group)
        k = self._seen[key]
        self._seen[key] += 1
        n = self.occurrences.get((inst.collective, inst.group), 1)
        step = min(k * self.steps_per_pass // max(n, 1), self.steps_per_pass - 1)
        return inst.iteration * self.steps_per_pass + step
