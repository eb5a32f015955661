"""The emulated Clos in network namespaces on this machine, replayed by the engine (`netns`).

Its switches are ours: their ports are shaped and marked, their counters read, the scenario's
link events applied to them. What the simulator models and this fabric cannot (a switch's own
latency, marking at departure) is refused before anything is made, and so is the AF_XDP send
path (the Clos shapes and marks with qdiscs that AF_XDP goes around).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from collectors.nic import NetlinkCounters
from emulator.backends.base import (
    BackendContext,
    BackendOptions,
    Session,
    TimescaleRequest,
)
from emulator.backends.engine.backend import EngineBackend
from emulator.backends.engine.session import EngineSession, bring_up
from emulator.backends.engine.timescale import dilated_timescale
from emulator.backends.link_events import LinkEventRunner, flows_crossing
from emulator.backends.link_events import resolve as resolve_link_events
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario.model import Scenario
from emulator.timescale.tdf import TdfChoice
from fabrics.spec import ClosSpec, DutSpec


def need_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "the emulated fabric needs root (network namespaces, qdiscs, BPF); --backend sim "
            "does not"
        )


def refuse_unmodelled_keys(scenario: Scenario) -> None:
    """What only the simulator models, and the AF_XDP send path, in one line naming the key."""
    fabric = scenario.fabric
    if isinstance(fabric, ClosSpec) and fabric.switch_latency_ns > 0:
        raise ScenarioError(
            f"fabric.switch_latency_ns: {fabric.switch_latency_ns:g} ns asked, but the emulated "
            "fabric's hops take what this machine takes; only the simulator models it "
            "(--backend sim or run.backend: sim)"
        )
    if isinstance(fabric, ClosSpec) and fabric.ecn_mark_point == "departure":
        raise ScenarioError(
            f"fabric.ecn_mark_point: {fabric.ecn_mark_point} asked, but the emulated fabric's "
            "markers judge a packet as it arrives at the port (before its queue); only the "
            "simulator marks at departure (--backend sim or run.backend: sim)"
        )
    check_send_path(scenario)
    refuse_engine_entropy(scenario)


def refuse_engine_entropy(scenario: Scenario) -> None:
    """Per-packet entropy leaves from the UDP sockets of each port (emulator.engine.
    entropy_ports); an AF_XDP port sends each flow's frames from one header: refused there."""
    if scenario.transport.entropy != "per_qp" and scenario.engine.send_path == "af_xdp":
        raise ScenarioError(
            f"transport.entropy: {scenario.transport.entropy} needs engine.send_path udp_gso "
            "(the AF_XDP path sends each queue pair from one UDP source port)"
        )


def check_send_path(scenario: Any) -> None:
    """engine.send_path af_xdp runs toward a DUT only: refused in one line elsewhere."""
    if scenario.engine.send_path == "af_xdp" and not isinstance(scenario.fabric, DutSpec):
        raise ScenarioError(
            "engine.send_path: af_xdp runs toward a switch under test (fabric kind dut) only; "
            "the emulated Clos shapes and ECN-marks its links with qdiscs that AF_XDP goes "
            "around: use udp_gso"
        )


class NetnsSession(EngineSession):
    """The emulated Clos: switch namespaces whose egress ports we shape, mark and read."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        super().__init__(context, live)
        spec = context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        self.port_line_rate_bps = spec.port_rate_bps
        if spec.link_events:
            cables = resolve_link_events(spec, live.topology)
            self.links = LinkEventRunner(
                live, spec.link_events, cables, context.tdf, context.options.say
            )
        if self.pfc:
            context.options.say(
                "warning: PFC frames are sent, but the emulated Linux fabric does not pause for "
                "them (a switch under test does)"
            )

    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        from fabrics.topology import HOST_IFNAME

        world = self.context.planned.world_size
        return {r: NetlinkCounters(HOST_IFNAME, self.live.rank_netns(r)) for r in range(world)}

    def counts_classes(self) -> bool:
        return bool(self.marker_name == "ebpf")

    def _pfc_ifname(self, rank: int) -> str:
        from fabrics.topology import HOST_IFNAME

        del rank
        return HOST_IFNAME

    def ports_reader(self) -> Callable[[], list[Any]] | None:
        from fabrics.counters import read_port_counters

        live, qdiscs = self.live, self._qdisc_stats()
        return lambda: list(read_port_counters(live, qdiscs=qdiscs).values())

    def links_reader(self) -> Callable[[], dict[Any, Any]] | None:
        from fabrics.link_watch import read_links

        netns = dict(self.live.netns)
        return lambda: dict(read_links(netns))

    def _lossless(self) -> bool:
        # drops and retransmissions are what a loss impairment or a link event asked for
        spec = self.context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        return not spec.loss_impairment() and self.links is None

    def impairments(
        self, flows: Callable[[], list[dict[str, Any]]], job_end_s: float | None
    ) -> dict[str, Any]:
        spec = self.context.scenario.fabric
        assert isinstance(spec, ClosSpec)
        out: dict[str, Any] = {}
        loss = spec.loss_impairment()
        if loss:
            out["loss_probability"] = loss
            try:
                reader = self.ports_reader()
                out["loss_drops"] = sum(c.loss_drops for c in reader()) if reader else 0
            except Exception as exc:  # the fabric may be gone after a failure: say so
                out["loss_drops"] = f"unknown ({type(exc).__name__}: {exc})"
            out["packets_retransmitted"] = self.engine_metadata.get("counters", {}).get(
                "packets_resent_planned", 0
            )
        if self.links is not None:
            end_s = job_end_s or float("inf")
            crossing = flows_crossing(self.live.topology, self.links.down_windows(end_s), flows())
            out["link_events"] = self.links.applied
            out["flows_crossing_a_down_link"] = dict(crossing)
            if self.links.errors:
                out["link_event_errors"] = self.links.errors
        return out


class NetnsEngineBackend(EngineBackend):
    """The emulated Clos in network namespaces on this machine, replayed by the engine."""

    name = "netns"

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        del options
        refuse_unmodelled_keys(scenario)
        need_root()

    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        return dilated_timescale(request)

    def open(self, context: BackendContext) -> Session:
        return NetnsSession(context, bring_up(context))
