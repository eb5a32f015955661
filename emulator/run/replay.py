"""One replay of a planned workload: the driver (which flow may start when), the recorder it
feeds, and their bookkeeping (iterations, stragglers, progress). Backend-neutral: it sees events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable

from collectors.recorder import RunRecorder
from collectors.records import instance_metas
from emulator.events import CollectiveMemberStarted, RunEvent
from emulator.interrupts import Interrupts
from emulator.planning.attribution import attribution_class, seed_classes
from emulator.planning.workload import Driver, PlannedWorkload
from emulator.progress import ProgressState
from emulator.scenario.model import Scenario
from emulator.schedule.driver import FlowLike
from emulator.schedule.plan import CollectiveInstance


class Replay:
    """One replay on a live fabric: the schedule, the recorder, and their bookkeeping."""

    def __init__(
        self,
        scenario: Scenario,
        planned: PlannedWorkload,
        recorder: RunRecorder,
        interrupts: Interrupts | None = None,
    ) -> None:
        self.scenario = scenario
        self.interrupts = interrupts or Interrupts()
        self.planned = planned
        self.recorder = recorder
        self.unpaired: list[str] = []
        self.iteration_of: dict[int, int] = {}
        self.stragglers = {int(r) for r in scenario.compute.stragglers}
        # collective instances with a straggler among their members, by type
        self.affected: Counter[str] = Counter()
        # attribution classes (emulator.planning.attribution): one per collective type of the plan
        # (with several jobs: per job and type), and each instance's, for the tag its flows'
        # packets carry on the emulated fabric
        self.classes_by_job = len(planned.placements) > 1
        if self.classes_by_job:
            keys: Iterable[Hashable] = {
                (r.job, r.collective) if r.job else r.collective for r in planned.ideal.instances
            }
        else:
            keys = planned.collectives_by_type
        self.classes = seed_classes(keys)
        self.class_of_instance: dict[int, int] = {}
        planned.numbering.restart()  # a replay numbers its instances from the first
        self.job: Driver = planned.schedule(scenario, self._on_instance, self._on_member_issued)

    def _on_instance(self, inst: CollectiveInstance) -> None:
        if self.stragglers.intersection(inst.members):
            self.affected[inst.collective] += 1
        self.class_of_instance[inst.id] = attribution_class(inst, self.classes, self.classes_by_job)
        iteration = self.planned.numbering.number(inst)
        self.iteration_of[inst.id] = iteration
        ideal = self.planned.ideal_time(inst)
        if ideal is None:
            self.unpaired.append(f"{inst.collective} #{inst.id}")
        flows, coll = instance_metas(inst, iteration, ideal)
        self.recorder.add_plan(flows, [coll])

    def _on_member_issued(self, collective_id: int, rank: int, time_s: float) -> None:
        # the rendezvous (last member in) is where busbw is timed from, as the ideal model does
        self.recorder.on_events([CollectiveMemberStarted(collective_id, rank, time_s)])

    def tag_of(self, flow: FlowLike) -> int:
        """The attribution class a flow's packets carry (its instance's; 0: none known)."""
        return self.class_of_instance.get(flow.instance, 0)

    def on_events(self, batch: list[RunEvent]) -> None:
        self.interrupts.check()
        self.recorder.on_events(batch)

    def progress(self, throughput_bps: float = 0.0) -> ProgressState:
        results = self.job.results
        done_by_iteration: dict[int, int] = {}
        for r in list(results):
            it = self.iteration_of.get(r.id, 0)
            done_by_iteration[it] = done_by_iteration.get(it, 0) + 1
        planned = self.planned.numbering
        iterations_done = 0
        per_iteration = max(self.planned.collectives // max(planned.total, 1), 1)
        while done_by_iteration.get(iterations_done, 0) >= per_iteration:
            iterations_done += 1
        return ProgressState(
            len(results),
            min(iterations_done, planned.total),
            throughput_bps,
        )

    @property
    def job_time_s(self) -> float | None:
        ends = [r.end_s for r in self.job.results]
        return max(ends) if ends else None
