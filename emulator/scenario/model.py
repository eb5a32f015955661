"""The scenario: what to replay, on which fabric, with which transport, measured how.

Each section is a frozen dataclass whose fields are the YAML keys. Sections owned by other layers
(fabric, transport, collectives, compute, generators) are defined next to the code that uses them
and only composed here, so the default of every parameter is written exactly once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from collectors.expectations import Expectation
from collectors.fidelity import FidelityLimits
from emulator.config import param
from emulator.engine.params import EngineParams
from emulator.errors import InputError
from emulator.scenario.cluster import ClusterSpec
from emulator.scenario.jobs import JobSpec, check_jobs, job_names
from emulator.scenario.workload_spec import WorkloadSpec
from emulator.schedule.params import CollectivesParams, ComputeParams
from emulator.traffic.spec import TrafficPattern
from emulator.traffic.streams import StreamSpec
from emulator.transport.params import TransportParams
from fabrics.spec import FABRIC_SPECS, ClosSpec


@dataclass(frozen=True)
class PrometheusSpec:
    """Live Prometheus exporter of `emulate run`."""

    enabled: bool = param(True, doc="serve live metrics during `emulate run`")
    bind_address: str = param("127.0.0.1", doc="address the exporter listens on")
    port: int = param(9464, doc="exporter TCP port (0 picks a free one)", min=0, max=65535)
    pushgateway_url: str | None = param(
        None, doc="also push the final metrics to this Pushgateway (runs shorter than a scrape)"
    )
    linger_s: float = param(
        0.0,
        doc="keep serving the final metrics this long after the results are written, so a "
        "Prometheus scraping every few seconds sees the verdict and the end-of-run counters "
        "(Grafana's 'Fidelity verdict per server'); Ctrl-C ends the wait",
        unit="s",
        min=0.0,
        max=3600.0,
    )


@dataclass(frozen=True)
class CaptureSpec:
    """Packet capture at ranks' interfaces, into the results' capture/rank-N.pcap."""

    ranks: tuple[int, ...] = param(doc="the ranks whose interface is captured", min=0)
    packets: int = param(
        10_000, doc="most packets kept per rank (the first ones)", min=1, max=10_000_000
    )
    snap_bytes: int = param(
        128,
        doc="bytes kept of each packet (128 holds the Ethernet, IPv4, UDP and RoCE headers)",
        unit="B",
        min=64,
        max=65535,
    )

    def __post_init__(self) -> None:
        if not self.ranks:
            raise ValueError("ranks: name at least one rank to capture")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ranks: a rank is listed twice")


@dataclass(frozen=True)
class MetricsSpec:
    """What is measured during a run and where results go."""

    sample_interval_s: float = param(
        0.1,
        doc="NIC and switch-port sampling period, in wall-clock seconds",
        unit="s",
        min=0.001,
        max=60.0,
    )
    prometheus: PrometheusSpec = field(default_factory=PrometheusSpec)
    fidelity: FidelityLimits = field(default_factory=FidelityLimits)
    results_dir: str = param("results", doc="parent folder of results/<scenario>-<timestamp>/")
    capture: CaptureSpec | None = param(
        None,
        doc="capture the packets of some ranks' interfaces (pcap, timestamps in target time): "
        "the emulated fabric and a switch under test with tcpdump in the rank's namespace, the "
        "simulator at its hosts (docs/results.md)",
    )
    one_way_latency: Literal["auto", "on", "off"] = param(
        "auto",
        doc="one-way latency of data packets (a send stamp in each packet's payload, the "
        "kernel's receive time; every rank is on this machine, so one clock): per QP and class "
        "in the results and as a Prometheus histogram. Auto means on with traffic patterns "
        "and off for a trace replay alone. Its cost (bench/engine_throughput.py, packets/s with "
        "stamps over without) is within the bench's noise on the native data path (1.05 at "
        "1024 B, 0.97 at 4096 B); the Python path lost about 12% to it",
    )


@dataclass(frozen=True)
class PfcFramesSpec:
    """A rank sending IEEE 802.1Qbb PFC frames during the replay (a switch under test pauses
    for them; the emulated Linux fabric does not)."""

    rank: int = param(doc="the rank whose interface sends them", min=0)
    pause_quanta: dict[str, int] = param(
        doc="priority (0..7) -> pause time in quanta of 512 bit times (0..65535; 0 resumes)"
    )
    frames_per_s: float | None = param(
        None,
        doc="frames per second (target time); or give duty_cycle",
        unit="1/s",
        min=0.0,
        min_exclusive=True,
    )
    duty_cycle: float | None = param(
        None,
        doc="share of time the paused priorities stay paused at the rank's line rate (0..1]; "
        "or give frames_per_s",
        min=0.0,
        max=1.0,
        min_exclusive=True,
    )
    start_us: float = param(0.0, doc="first frame, after the replay starts", unit="us", min=0.0)
    stop_us: float | None = param(
        None, doc="no frame after this (default: the run's end)", unit="us", min=0.0
    )

    def __post_init__(self) -> None:
        if (self.frames_per_s is None) == (self.duty_cycle is None):
            raise ValueError("frames_per_s: give exactly one of frames_per_s and duty_cycle")
        if not self.pause_quanta:
            raise ValueError("pause_quanta: name at least one priority")
        for priority, quanta in self.pause_quanta.items():
            if not (priority.isdigit() and 0 <= int(priority) <= 7):
                raise ValueError(f"pause_quanta: priority {priority!r} is not 0..7")
            if not (isinstance(quanta, int) and 0 <= quanta <= 0xFFFF):
                raise ValueError(f"pause_quanta: {priority}: {quanta!r} is not 0..65535 quanta")

    @property
    def quanta_by_priority(self) -> dict[int, int]:
        return {int(p): q for p, q in self.pause_quanta.items()}


@dataclass(frozen=True)
class RunSpec:
    """How the replay is run: time dilation, deadline, seed."""

    time_dilation: float | Literal["auto"] = param(
        "auto",
        doc="time dilation factor: link rates divided by it, timers multiplied by it, measured "
        "durations divided by it; `auto` calibrates this machine",
        min=1.0,
        max=1_000_000.0,
    )
    deadline_s: float | None = param(
        None,
        doc="wall-clock limit of the replay; default: computed from the ideal time with a margin",
        unit="s",
        min=0.0,
        min_exclusive=True,
    )
    seed: int = param(
        0,
        doc="the draw of the queue pairs' UDP source ports, and so of their ECMP paths (on a NIC "
        "they follow from QP numbers, which differ run to run): 0 is the plain hash, each other "
        "value another placement; the study's repeats use seed, seed+1, ... ECN marking draws "
        "on the emulated fabric come from the kernel's random source and are not seeded",
        min=0,
    )
    pfc_frames: tuple[PfcFramesSpec, ...] = param(
        (), doc="PFC frame generators (switch tests: PFC propagation, pause handling)"
    )
    backend: Literal["auto", "netns", "dut", "sim", "cluster", "mininet", "flow"] = param(
        "auto",
        doc="what runs the scenario: netns (the Clos emulated in network namespaces on this "
        "machine, the engine sending real packets), dut (the engine toward a switch under "
        "test), sim (a packet-level simulation of the same Clos from the same transport code: "
        "no root, no time dilation, simulated time, PFC, link delay and switch latency), flow "
        "(the same Clos at flow level: queue pairs as DCQCN fluid rates over fluid queues, "
        "simulated time, for scale: docs/flow-level.md), "
        "cluster (the emulated Clos over the servers of run.cluster), mininet (the engine on "
        "a Mininet network a user's script started: emulator.mininet.run_on_mininet); auto: "
        "cluster with run.cluster, else netns for a clos fabric, dut for a dut fabric, mininet "
        "for a mininet one (`emulate run --backend` overrides)",
    )
    cluster: ClusterSpec = param(
        default_factory=ClusterSpec,
        doc="spread the run over the servers of a Ray cluster, one engine actor per server "
        "(README, 'Past one machine'); without servers: one machine, no Ray",
    )
    ideal: Literal["max_min", "egress_share"] = param(
        "max_min",
        doc="the congestion-free yardstick a run is measured against (ideal job time and busbw): "
        "max_min, every link shared max-min fairly (exact; its cost grows with the flows in "
        "flight times their completion instants: hours at 16,384 ranks), or egress_share, each "
        "NIC's egress shared among its flows and nothing else limiting them (equal to max_min "
        "where senders' NICs are the bottleneck, optimistic where receivers or links are; "
        "seconds at any scale): docs/flow-level.md",
    )


@dataclass(frozen=True)
class SimSpec:
    """How the packet-level simulation (run.backend: sim) measures."""

    sample_interval_us: float = param(
        100.0,
        doc="simulated time between two readings of every port's exact queue depth, counters "
        "and pauses and every NIC's bytes (ports.parquet, nic.parquet); smaller is finer and "
        "makes larger tables",
        unit="us",
        min=0.1,
        max=1_000_000.0,
    )
    time_limit_s: float | None = param(
        None,
        doc="simulated time after which an unfinished run stops (partial results); default: "
        "100 times the ideal job time, at least 1 s",
        unit="s",
        min=0.0,
        min_exclusive=True,
    )
    draw_seed: int = param(
        0,
        doc="salts the simulation's own random draws (ECN marks, random loss) and nothing else: "
        "run.seed also draws the source ports and so the paths; this keeps every flow on its "
        "path and changes only the draws (0: the draws run.seed alone gives)",
        min=0,
    )
    native_fabric: Literal["auto", "on", "off"] = param(
        "auto",
        doc="run the simulated fabric (its event heap, ports, ECMP switches and PFC accounts) in "
        "C (emulator/native/simfab.c), which gives the Python fabric's results bit for bit, "
        "faster; the hosts and their transport stay in Python but for the receive queue pairs' "
        "common path (in-order data that asks for nothing). auto: in C when it is built and "
        "the fabric is one it runs (every tier's load_balancing ecmp, fewer than 32,768 hosts), "
        "else in Python; on: in C or refuse, saying why; off: in Python. summary.json "
        "engine.fabric_code says which ran and why",
    )
    reference_draws: int = param(
        4,
        doc="with --reference sim: how many simulations of the same flows on the same paths, "
        "each with its own draws (draw_seed, draw_seed+1, ...), measure how far the model "
        "differs from itself; a metric counts as a deviation only beyond both its stated bound "
        "and that spread (1: the stated bounds alone). Each draw is a whole simulation",
        min=1,
        max=32,
    )


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A whole scenario file. `source` is where it was read from (paths resolve against it)."""

    name: str = param("scenario", doc="short name, used for the results folder")
    description: str = param("", doc="free text shown in reports")
    workload: WorkloadSpec | None = param(
        None, doc="the trace to replay; optional when `traffic` patterns are given"
    )
    workloads: tuple[JobSpec, ...] = param(
        (),
        doc="several jobs sharing the fabric, instead of `workload`: each a trace or a "
        "generator with its name, hosts (rank-to-host placement), iterations and start offset; "
        "results keep them apart (a job column in every table, a per-job summary)",
    )
    traffic: tuple[TrafficPattern, ...] = param(
        (), doc="synthetic traffic patterns (switch tests), instead of or next to the workload"
    )
    streams: tuple[StreamSpec, ...] = param(
        (),
        doc="stateless packet streams (a tester's plain flows: no acknowledgement, "
        "retransmission or congestion control), counted for loss, reordering, CE marks and "
        "latency in summary.json streams",
    )
    fabric: Any = param(
        default_factory=ClosSpec,
        doc="the network: {kind: clos|dut|mininet, ...}",
        kinds=FABRIC_SPECS,
    )
    transport: TransportParams = field(default_factory=TransportParams)
    collectives: CollectivesParams = field(default_factory=CollectivesParams)
    compute: ComputeParams = field(default_factory=ComputeParams)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    run: RunSpec = field(default_factory=RunSpec)
    expect: tuple[Expectation, ...] = param(
        (),
        doc="expected results (switch tests): each printed PASS, FAIL or NOT APPLICABLE after "
        "the run; `emulate run` exits 1 when one fails",
    )
    engine: EngineParams = field(default_factory=EngineParams)
    sim: SimSpec = field(default_factory=SimSpec)
    source: Path | None = field(default=None, compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        if self.workload is not None and self.workloads:
            raise ValueError("workloads: give either `workload` or `workloads`, not both")
        if self.workload is None and not self.workloads and not self.traffic and not self.streams:
            raise ValueError(
                "workload: give a workload (a trace), traffic patterns or streams, or several"
            )
        check_jobs(self.workloads)
        names = [p.name for p in self.traffic]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"traffic: two patterns are named {name!r}")
        streams = [s.name for s in self.streams]
        for name in streams:
            if streams.count(name) > 1:
                raise ValueError(f"streams: two streams are named {name!r}")
        for e in self.expect:
            if e.pattern is not None and e.pattern not in names:
                raise ValueError(f"expect: no traffic pattern is named {e.pattern!r}")

    @property
    def jobs(self) -> tuple[JobSpec, ...]:
        """The scenario's jobs: its `workloads`, or its one `workload` as a job named after the
        scenario (every table's job column), or none (traffic patterns only)."""
        if self.workloads:
            names = job_names(self.workloads)
            return tuple(
                dataclasses.replace(job, name=name)
                for job, name in zip(self.workloads, names, strict=True)
            )
        if self.workload is None:
            return ()
        fields = {f.name: getattr(self.workload, f.name) for f in dataclasses.fields(WorkloadSpec)}
        return (JobSpec(**fields, name=self.name),)

    @property
    def several_jobs(self) -> bool:
        return bool(self.workloads)

    def with_iterations(self, iterations: int) -> Scenario:
        """The scenario with its trace (every job's) replayed `iterations` times (--iterations)."""
        if self.workloads:
            jobs = tuple(dataclasses.replace(j, iterations=iterations) for j in self.workloads)
            return dataclasses.replace(self, workloads=jobs)
        if self.workload is None:
            raise InputError("--iterations: the scenario has traffic patterns only, no trace")
        workload = dataclasses.replace(self.workload, iterations=iterations)
        return dataclasses.replace(self, workload=workload)

    def with_jobs(self, hosts: Mapping[str, tuple[int, ...]]) -> Scenario:
        """The scenario with only the jobs named in `hosts`, each pinned to the hosts given (the
        study's "each job alone": where it ran beside the others, emulator.planning.workload's
        placements)."""
        kept = tuple(
            dataclasses.replace(j, hosts=tuple(hosts[j.name])) for j in self.jobs if j.name in hosts
        )
        missing = set(hosts) - {j.name for j in kept}
        if missing:
            raise InputError(f"{self.source or 'scenario'}: no job named {sorted(missing)[0]!r}")
        return dataclasses.replace(self, workload=None, workloads=kept)

    def resolve(self, relative: str) -> Path:
        """A path written in the scenario, resolved against the scenario file's folder."""
        path = Path(relative).expanduser()
        if path.is_absolute() or self.source is None:
            return path
        return self.source.parent / path
