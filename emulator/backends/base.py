"""The seam every backend plugs into: what a run asks of a backend and what it gets back.

A backend makes a planned workload happen on something: the emulated netns Clos with the engine
(backends/netns), ports toward a switch under test with the engine (backends/dut), the
packet-level simulator (backends/sim), the emulated Clos over several servers of a Ray cluster
(backends/cluster). The run (emulator.run) knows nothing else of it: it picks one from the
registry (emulator.backends.BACKENDS) and asks it, in this order:

1. `Backend.check(scenario, options)`: refuse, before anything is planned or written, what it
   cannot run: root it needs, scenario keys it does not model, a cluster that is not safe. One
   line naming the key (ScenarioError) or what is missing (EnvironmentProblem). Then
   `Backend.warnings(scenario)`: what it runs as asked but reads otherwise than the simulator
   (the run prints each and keeps it in summary.json `warnings`).
2. `Backend.timescale(request)`: the time dilation factor it will run at (a DUT: real time; the
   simulator: simulated time; an emulated fabric: the scenario's factor, or auto: a load curve
   measured where it runs, then short replays of the scenario itself through `request.prober`,
   which the run supplies; emulator.timescale).
3. `Backend.open(context)` makes it real: bring a fabric up, place the ranks, check every
   destination is allowed. Register every release on `context.stack` as soon as the resource
   exists (it unwinds on success, error and Ctrl-C), and call `context.interrupts.check()` between
   long steps. Return a Session that knows its ECN marker's name (a simulator: the law it applies).
4. `Session.run(job)` replays: take flows from `job.driver` (emulator.schedule.driver.FlowDriver:
   which flow may start when, completions handed back), send what happens to `job.on_events` in
   target time (emulator.events: FlowStarted, FlowFinished, RateSample, ...), send counter
   samples (NicSample, PortSample with pause-equivalents, CpuSample; or NicSamples and
   PortSamples, every NIC or port at once as arrays) to `job.on_samples`, and tick
   `job.progress` now and then. Return when the driver is drained, the deadline passed or the run
   was interrupted; never raise for those: put the exception in `SessionReport.error` so the run
   still writes its partial results (then it re-raises it). `Backend.failures` names the
   exception types a session may end with that are the run's failures, not bugs.
5. The report says what only the backend knows: its metadata (recorded in summary.json), the
   per-QP tester counters, its own fidelity reasons and the checks it cannot judge (a DUT's drops
   are not in our counters; a simulator has no late ticks), and what its impairments did.

A backend never writes results, never prints tables and never judges expectations: the run does,
the same way for all of them. It imports nothing from the run (tests/unit/test_layering.py).
backends/sim is the smallest complete example; a new backend is one folder and one registry line.
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
from emulator.interrupts import Interrupts
from emulator.latency import LatencyHistogram
from emulator.planning.workload import Driver, PlannedWorkload
from emulator.progress import ProgressLine, ProgressState
from emulator.scenario.model import Scenario
from emulator.schedule.driver import FlowLike
from emulator.timescale.tdf import TdfChoice


@dataclass(frozen=True)
class BackendOptions:
    """What a backend is told of how the run was asked to go."""

    say: Callable[[str], None]  # a line for the user (stderr)
    fabric_prefix: str = "emu-"  # namespace name prefix of the fabric
    recalibrate: bool = False  # measure the machine again instead of using a cached factor
    cluster: str | None = None  # a Ray cluster's address given on the command line
    tdf: float | None = None  # the time dilation factor given on the command line


# A short replay of the scenario at a factor (emulator.run supplies it): the engine's metadata and
# the run's fidelity reasons of the engine's own timing that the flows' tables give.
Prober = Callable[[float], dict[str, Any]]


@dataclass(frozen=True)
class TimescaleRequest:
    """What a backend needs to choose its time dilation factor."""

    scenario: Scenario
    options: BackendOptions
    planned: PlannedWorkload
    prober: Prober


@dataclass
class BackendContext:
    """What a backend is given to make the run's fabric real."""

    scenario: Scenario
    planned: PlannedWorkload  # flows, ideal times, QP profiles, world size
    tdf: float  # 1 for real time (a DUT); a simulator runs in target time whatever it is
    options: BackendOptions
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
    # attribution (emulator.planning.attribution): each flow's class, for a session whose switches
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
    # metrics.capture: each captured rank's packets, a pcap file in target time (collectors.capture)
    captures: dict[int, bytes] = field(default_factory=dict)


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

    def impairments(
        self, flows: Callable[[], list[dict[str, Any]]], job_end_s: float | None
    ) -> dict[str, Any]:
        """What the scenario's impairments did (loss drops, link events); `flows()` gives the
        flow rows (called only by a backend that needs them: a large run's rows as dictionaries
        take more memory than its table)."""
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
    # a session's failures that end a run as the run's own (results written partial, the error
    # reported in one line), beside KeyboardInterrupt
    failures: ClassVar[tuple[type[BaseException], ...]] = ()
    # its clock is the target's, not a dilated wall clock (a simulator)
    simulated: ClassVar[bool] = False

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        """Refuse what it cannot run, before anything is planned or written (see the module)."""
        del scenario, options

    def warnings(self, scenario: Scenario) -> list[str]:
        """What it runs as asked but reads otherwise than the simulator (the run says each on
        the terminal and in summary.json `warnings`)."""
        del scenario
        return []

    @abstractmethod
    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        """The time dilation factor it runs the planned workload at (see the module)."""

    @abstractmethod
    def open(self, context: BackendContext) -> Session:
        """Bring it up (every release registered on context.stack) and return the session."""
