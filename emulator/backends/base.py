"""The seam every backend plugs into: what a run gives a backend and what it gets back.

A backend makes a planned workload happen on something: the emulated netns Clos with the engine,
ports toward a switch under test with the engine, the packet-level simulator (backends.sim), and
later the engine spread over several servers on Ray. The run (emulator.run.execute) knows nothing else of
it: it picks one from the registry (emulator.backends.BACKENDS), and the collectors only ever see
events and samples.

For whoever adds one (the Ray cluster next; backends.sim is the smallest complete example):

1. `Backend.open(context)` makes it real: bring a fabric up, place the ranks, check every
   destination is allowed. Register every release on `context.stack` as soon as the resource
   exists (it unwinds on success, error and Ctrl-C), and call `context.interrupts.check()` between
   long steps. Return a Session that knows its ECN marker's name (a simulator: the law it applies).
2. `Session.run(job)` replays: take flows from `job.driver` (emulator.engine.driver.FlowDriver:
   which flow may start when, completions handed back), send what happens to `job.on_events` in
   target time (emulator.events: FlowStarted, FlowFinished, RateSample, ...), send counter
   samples (NicSample, PortSample with pause-equivalents, CpuSample) to `job.on_samples`, and tick
   `job.progress` now and then. Return when the driver is drained, the deadline passed or the run
   was interrupted; never raise for those: put the exception in `SessionReport.error` so the run
   still writes its partial results (then it re-raises it).
3. The report says what only the backend knows: its metadata (recorded in summary.json), the
   per-QP tester counters, its own fidelity reasons and the checks it cannot judge (a DUT's drops
   are not in our counters; a simulator has no late ticks), and what its impairments did.

A backend never writes results, never prints tables and never judges expectations: the run does,
the same way for all of them.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collectors.fidelity import PartScope
from collectors.queue_pairs import QpRow
from emulator.events import RunEvent
from emulator.latency import LatencyHistogram
from emulator.run.interrupts import Interrupts
from emulator.run.options import RunOptions
from emulator.run.progress import ProgressLine, ProgressState
from emulator.run.tdf import TdfChoice
from emulator.run.workload import Driver, PlannedWorkload
from emulator.scenario.model import Scenario
from emulator.schedule.driver import FlowLike


@dataclass
class BackendContext:
    """What a backend is given to make the run's fabric real."""

    scenario: Scenario
    planned: PlannedWorkload  # flows, ideal times, QP profiles, world size
    tdf: float  # 1 for real time (a DUT); a simulator runs in target time whatever it is
    options: RunOptions  # say(), fabric_prefix, progress
    stack: contextlib.ExitStack  # releases, in reverse order, whatever happens
    interrupts: Interrupts  # check() raises KeyboardInterrupt for a Ctrl-C not yet delivered


@dataclass
class ReplayJob:
    """What a session replays and where it reports."""

    driver: Driver
    on_events: Callable[[list[RunEvent]], None]  # what happened (target time)
    on_samples: Callable[[list[RunEvent]], None]  # counter readings (target time)
    progress: ProgressLine
    state: Callable[[float], ProgressState]  # progress so far, given the throughput in b/s
    # set by a session whose one-way latency per traffic class can be read during the run
    latency_source: Callable[[Callable[[], dict[int, LatencyHistogram]]], None] = lambda _source: (
        None
    )
    # attribution (emulator.run.attribution): each flow's class, for a session whose switches
    # count by it (the emulated fabric's eBPF marker), and the classes (key -> class), which
    # grow as the run meets collective types its plan did not have
    tag_of: Callable[[FlowLike], int] | None = None
    attribution_classes: dict[Hashable, int] = field(default_factory=dict)


@dataclass
class SessionReport:
    """What a session tells the run after replaying."""

    metadata: dict[str, Any]  # summary.json "engine": counters, timing, CPU, wall time
    queue_pairs: list[QpRow] = field(default_factory=list)  # the tester's per-QP counters
    reasons: list[str] = field(default_factory=list)  # fidelity problems only it can see
    unknown: list[str] = field(default_factory=list)  # its checks that had no data
    not_applicable: tuple[str, ...] = ()  # collectors.fidelity checks it cannot support
    leaves_out: tuple[str, ...] = ()  # what its model of the fabric does not include
    lossless: bool = True  # False: drops and retransmissions were asked for (impairments)
    pfc_sent: Counter[int] = field(default_factory=Counter)  # PFC frames our generators sent
    extra: dict[str, Any] = field(default_factory=dict)  # more of summary.json
    error: BaseException | None = None  # an interrupt or engine failure, raised after writing
    # a backend in parts (a cluster's servers): what each held and its own reasons, for a
    # verdict per part beside the run's (collectors.fidelity)
    parts: dict[str, PartScope] = field(default_factory=dict)


class Session(ABC):
    """One run's live backend, between bring-up and teardown."""

    marker_name: str  # the ECN marker (or the marking law) in use
    port_line_rate_bps: float | None = None  # switch ports' target rate, for their utilization

    @abstractmethod
    def run(self, job: ReplayJob) -> SessionReport:
        """Replay the job until its driver is drained or the run is stopped (see the module)."""

    @abstractmethod
    def metadata(self) -> dict[str, Any]:
        """summary.json's "fabric_backend": what was built (marker, shaper bursts, ...)."""

    def impairments(self, flows: list[dict[str, Any]], job_end_s: float | None) -> dict[str, Any]:
        """What the scenario's impairments did (loss drops, link events), given the flow rows."""
        del flows, job_end_s
        return {}

    def pfc_received(self) -> dict[int, int | None]:
        """PFC frames each rank's NIC received during the run (None: it cannot count them)."""
        return {}

    def expectation_view(self) -> Any:
        """What switch-test expectations read beyond the tables (uplink counters): the fabric."""
        return None


class Backend(ABC):
    name: ClassVar[str]

    @abstractmethod
    def open(self, context: BackendContext) -> Session:
        """Bring it up (every release registered on context.stack) and return the session."""

    def load_curve_tdf(
        self, scenario: Scenario, options: RunOptions, planned: PlannedWorkload
    ) -> TdfChoice | None:
        """time_dilation auto's first factor, measured where this backend runs (a cluster: on
        each of its servers); None: this machine's load curve (emulator.run.calibrate) is the
        one. The run then verifies the factor with short replays of the scenario on this
        backend (emulator.run.probe), whoever measured the curve."""
        del scenario, options, planned
        return None
