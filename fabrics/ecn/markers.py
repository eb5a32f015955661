"""Switch ECN markers, a registry: the eBPF phantom queue, tc RED, or none.

`auto` is the eBPF phantom queue: it applies DCQCN's marking law (Zhu et al., SIGCOMM 2015,
section 3.1) exactly as emulator/transport/marking.py does, per packet, on the instantaneous
queue, with independent (Bernoulli) draws, so a scenario marks the same whichever machine runs
it. RED is an explicit choice (`marker: red`) and differs (docs/scenario-reference.md says how):
it judges an average queue, spaces marks by packet count, and drops rather than marks above max
unless the packet is ECN-capable. The chosen name is reported in the live fabric (and so in the
run's metadata).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.ecn import ebpf
from fabrics.iproute import Cmd, run, tc
from fabrics.queues import WIRE_OVERHEAD_BYTES, EcnThresholds, EgressPort, drop_tail

Resource = dict[str, Any]


@dataclass(frozen=True)
class MarkCounters:
    marks: int
    queue_bytes: int | None = None
    peak_queue_bytes: int | None = None
    overflows: int | None = None
    loss_drops: int = 0  # packets dropped by the loss impairment
    # Where a PFC fabric would have paused (None: this marker cannot tell): wall seconds the
    # queue spent at or above the port's XOFF threshold, and how many times it rose to it.
    pause_s: float | None = None
    pause_events: int | None = None
    # per attribution class (the eBPF marker; None: this marker cannot tell), summing to the
    # port's counters (fabrics/ecn/phantom_marker.c)
    by_class: tuple[ebpf.ClassCounters, ...] | None = None


class Marker(ABC):
    name: ClassVar[str]

    @abstractmethod
    def leaf_qdisc(self, port: EgressPort) -> tuple[str, ...]:
        """The qdisc under the port's HTB class."""

    def attach(self, port: EgressPort) -> tuple[list[Cmd], list[Resource]]:
        """Extra commands on a marking port, and the resources they create."""
        del port
        return [], []

    def configure(
        self, ports: list[EgressPort], record: Callable[[list[Resource]], None] | None = None
    ) -> list[Resource]:
        """After attach: find what was loaded (passed to `record` as soon as known, so the
        ledger has it before anything else can fail), then write parameters. Returns the
        resources found (BPF programs)."""
        del ports, record
        return []

    def read(self, port: EgressPort, tc_stats: dict[str, Any]) -> MarkCounters | None:
        del port, tc_stats
        return None


class NoMarker(Marker):
    name = "none"

    def leaf_qdisc(self, port: EgressPort) -> tuple[str, ...]:
        return drop_tail(port)


class RedMarker(Marker):
    """tc RED with ecn and nodrop: marks ECT packets with a probability rising to Pmax between min
    and max (Kmin, Kmax) and every ECT packet above max (net/sched/sch_red.c, red_use_ecn without
    harddrop).

    Not the same law as the eBPF marker and the Python model (include/net/red.h; Floyd and
    Jacobson, "Random Early Detection Gateways", IEEE/ACM ToN 1993, section 7):
    - the queue judged is an exponentially weighted average (weight from `burst`), not the
      instantaneous one, so marking lags a burst;
    - marks are spaced by a packet count (p_a = p_b / (1 - count x p_b)), which makes them about
      uniform between marks: the long-run share is close to twice the linear p_b at the same
      average queue, where the eBPF marker draws each packet independently with p_b;
    - non-ECT packets (our ACKs, NAKs and CNPs) are dropped where an ECT one would be marked,
      unless `nodrop` (Linux 5.10+, TC_RED_NODROP) is set: it is set here, so a kernel or tc
      without it refuses the qdisc instead of dropping the feedback."""

    name = "red"
    AVPKT_BYTES = 1000

    def leaf_qdisc(self, port: EgressPort) -> tuple[str, ...]:
        if port.ecn is None:
            return drop_tail(port)
        e = port.ecn
        # burst (in avpkt) sets RED's averaging weight; Kmin/avpkt + 1 is tc-red(8)'s rule of thumb.
        burst = e.kmin_bytes // self.AVPKT_BYTES + 1
        return (
            "red",
            "limit",
            str(port.buffer_bytes),
            "min",
            str(e.kmin_bytes),
            "max",
            str(e.kmax_bytes),
            "avpkt",
            str(self.AVPKT_BYTES),
            "burst",
            str(burst),
            "probability",
            f"{e.pmax:g}",
            "bandwidth",
            f"{round(port.rate_bps)}bit",
            "ecn",
            "nodrop",
        )

    def read(self, port: EgressPort, tc_stats: dict[str, Any]) -> MarkCounters | None:
        leaf = tc_stats.get("leaf", {})
        if leaf.get("kind") != "red":
            return None
        return MarkCounters(
            marks=int(leaf.get("marked", 0)), queue_bytes=int(leaf.get("backlog", 0))
        )


class EbpfMarker(Marker):
    name = "ebpf"

    def __init__(self, *, trace: bool = False, classes: bool = True) -> None:
        """`trace`, `classes=False`: the test and bench variants (ebpf.compiled_object)."""
        self.obj = ebpf.compiled_object(trace=trace, classes=classes)
        self.maps: dict[tuple[str, str], ebpf.PortMaps] = {}

    def leaf_qdisc(self, port: EgressPort) -> tuple[str, ...]:
        return drop_tail(port)

    def attach(self, port: EgressPort) -> tuple[list[Cmd], list[Resource]]:
        if not _needs_program(port):
            return [], []
        res = {"kind": "qdisc", "netns": port.netns, "dev": port.dev, "parent": "clsact"}
        return ebpf.attach_commands(port.netns, port.dev, self.obj), [res]

    def configure(
        self, ports: list[EgressPort], record: Callable[[list[Resource]], None] | None = None
    ) -> list[Resource]:
        marking = [p for p in ports if _needs_program(p)]
        by_ns: dict[str, list[EgressPort]] = {}
        for p in marking:
            by_ns.setdefault(p.netns, []).append(p)
        prog_of: dict[tuple[str, str], int] = {}
        for ns, group in by_ns.items():
            found = ebpf.discover(ns)
            for p in group:
                if p.dev not in found:
                    raise EnvironmentProblem(f"no marker program on {p.dev} in {ns} after attach")
                prog_of[(ns, p.dev)] = found[p.dev]
        maps = ebpf.maps_of(list(prog_of.values()))
        tags = ebpf.prog_tags(list(prog_of.values()))
        resources: list[Resource] = []
        for p in marking:
            m = maps[prog_of[(p.netns, p.dev)]]
            self.maps[(p.netns, p.dev)] = m
            resources.append(
                {
                    "kind": "bpf_prog",
                    "netns": p.netns,
                    "dev": p.dev,
                    "id": m.prog_id,
                    "tag": tags[m.prog_id],
                }
            )
        if record is not None:
            record(resources)
        for p in marking:
            ecn = p.ecn or EcnThresholds(0, 0, 0.0)
            params = ebpf.MarkerParams(
                p.rate_bps,
                ecn.kmin_bytes,
                ecn.kmax_bytes,
                ecn.pmax,
                p.buffer_bytes,
                loss_probability=p.loss_probability,
                mark_ect=p.ecn is not None,
                xoff_bytes=p.xoff_bytes,
                overhead_bytes=WIRE_OVERHEAD_BYTES,
            )
            ebpf.write_params(self.maps[(p.netns, p.dev)], params)
        return resources

    def read(self, port: EgressPort, tc_stats: dict[str, Any]) -> MarkCounters | None:
        del tc_stats
        maps = self.maps.get((port.netns, port.dev))
        if maps is None:
            return None
        s = ebpf.read_state(maps)
        now_ns = time.monotonic_ns()
        now_queue = s.queue_bytes_at(now_ns, port.rate_bps)
        counts_pauses = port.xoff_bytes > 0
        return MarkCounters(
            s.marks,
            now_queue,
            s.peak_queue_bytes,
            s.overflows,
            s.loss_drops,
            pause_s=s.pause_ns_at(now_ns, port.rate_bps, port.xoff_bytes) / 1e9
            if counts_pauses
            else None,
            pause_events=s.pause_events if counts_pauses else None,
            by_class=s.classes_at(now_ns, port.rate_bps, port.xoff_bytes),
        )


def _needs_program(port: EgressPort) -> bool:
    """The eBPF program goes on ports that mark, and on ports that drop at random."""
    return port.ecn is not None or port.loss_probability > 0


MARKERS: dict[str, Callable[[], Marker]] = {"red": RedMarker, "ebpf": EbpfMarker, "none": NoMarker}


def qdisc_kind_available(kind_args: tuple[str, ...], probe_netns: str) -> bool:
    """Try the qdisc on the probe namespace's loopback: the only reliable test (it may be a
    module, built in, or absent, and tc's error for absent is 'Specified qdisc kind is unknown')."""
    try:
        run(tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", *kind_args, netns=probe_netns))
    except EnvironmentProblem:
        return False
    run(tc("qdisc", "del", "dev", "lo", "root", netns=probe_netns))
    return True


RED_PROBE = (
    "red",
    "limit",
    "400000",
    "min",
    "30000",
    "max",
    "90000",
    "avpkt",
    "1000",
    "burst",
    "55",
    "probability",
    "0.1",
    "bandwidth",
    "10mbit",
    "ecn",
    "nodrop",
)
NETEM_PROBE = ("netem", "delay", "1ms")


def choose_marker(requested: str, probe_netns: str) -> Marker:
    """The marker for a `marker:` value (auto: eBPF); refuses `red` on a kernel without RED (or
    whose RED lacks nodrop) and eBPF without its compiler, naming what is missing."""
    if requested not in ("auto", *MARKERS):
        raise ScenarioError(
            f"fabric.marker: unknown marker {requested!r} (known: auto, {', '.join(MARKERS)})"
        )
    if requested == "red":
        if not qdisc_kind_available(RED_PROBE, probe_netns):
            raise EnvironmentProblem(
                "fabric.marker: red asked but this kernel has no RED qdisc with ecn and nodrop "
                "(sch_red, Linux 5.10+); use marker: ebpf (or auto)"
            )
        return RedMarker()
    if requested == "auto":
        try:
            return EbpfMarker()
        except EnvironmentProblem as e:
            raise EnvironmentProblem(
                f"fabric.marker: auto is the eBPF marker, which cannot be built here ({e}); "
                "install it (./setup.sh) or choose marker: red explicitly"
            ) from e
    return MARKERS[requested]()
