"""The engine on a Mininet network a user built and started (`fabric: {kind: mininet}`).

The network comes from the user's script, through emulator.mininet.run_on_mininet, which hands
it to this backend for the length of one run (`network_in_use`); `emulate run` alone has no
network to run on and says how to get one. The ranks are the named Mininet hosts; the switches
are the user's, read (and ECN-marked by the project's eBPF marker) where they are Linux nodes in
namespaces of their own (fabrics/user_mininet.py). Drops in the user's switches are the
network's behaviour, not this machine's: they are reported, not judged against the verdict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from collectors.nic import NetlinkCounters
from emulator.backends.base import (
    BackendContext,
    BackendOptions,
    Session,
    TimescaleRequest,
)
from emulator.backends.engine.backend import EngineBackend
from emulator.backends.engine.session import EngineSession
from emulator.backends.netns.backend import need_root, refuse_engine_entropy
from emulator.errors import ScenarioError
from emulator.scenario.model import Scenario
from emulator.signals import signals_deferred
from emulator.timescale.tdf import TdfChoice
from fabrics.spec import MininetSpec

# the started Mininet network of the run in progress (emulator.mininet.run_on_mininet)
_NETWORK: ContextVar[Any] = ContextVar("mininet_network", default=None)

NO_NETWORK = (
    "fabric kind mininet runs on a Mininet network your script has built and started: call "
    "emulator.mininet.run_on_mininet(net, scenario) from it (docs/mininet.md); `emulate run` "
    "alone has none (for the scenario's own Clos built by Mininet, use fabric kind clos with "
    "builder: mininet)"
)


@contextlib.contextmanager
def network_in_use(net: Any) -> Iterator[None]:
    """Hand a started Mininet network to the runs started inside the block."""
    token = _NETWORK.set(net)
    try:
        yield
    finally:
        _NETWORK.reset(token)


class MininetSession(EngineSession):
    """Ranks on a user's Mininet hosts; the switches read where they are Linux nodes."""

    def __init__(self, context: BackendContext, live: Any) -> None:
        super().__init__(context, live)
        self.port_line_rate_bps = live.ports[0].rate_bps / live.rate_scale if live.ports else None
        for warning in live.warnings:
            context.options.say(f"warning: {warning}")
        for switch, why in sorted(live.left_alone.items()):
            context.options.say(f"switch {switch} is not read: {why}")

    def _nic_counters(self) -> dict[int, NetlinkCounters]:
        world = self.context.planned.world_size
        return {
            r: NetlinkCounters(self.live.interfaces[r], self.live.rank_netns(r))
            for r in range(world)
        }

    def _pfc_ifname(self, rank: int) -> str:
        return str(self.live.interfaces[rank])

    def counts_classes(self) -> bool:
        return bool(self.marker_name == "ebpf")

    def ports_reader(self) -> Callable[[], list[Any]] | None:
        from fabrics.user_mininet import read_ports

        if not self.live.ports:
            return None
        live, stats = self.live, self._qdisc_stats()
        return lambda: read_ports(live, stats)

    def _not_applicable(self) -> tuple[str, ...]:
        # the network is the user's: its drops are what it does, not this machine's doing
        return ("drops_in_lossless_fabric",)


def mininet_timescale(request: TimescaleRequest) -> TdfChoice:
    """The factor the user's links were built for: --tdf, the scenario's number, or (auto) the
    one the ranks' shaped links imply (host_link_gbps over their bw), all alike."""
    scenario, options, planned = request.scenario, request.options, request.planned
    spec = scenario.fabric
    assert isinstance(spec, MininetSpec)
    peak_bps = planned.world_size * spec.rank_rate_bps
    if options.tdf is not None:
        return TdfChoice(options.tdf, "command line", peak_bps)
    setting = scenario.run.time_dilation
    if setting != "auto":
        return TdfChoice(float(setting), "scenario", peak_bps)
    from fabrics.user_mininet import link_bps

    net = _NETWORK.get()
    nodes = getattr(net, "nameToNode", {}) if net is not None else {}
    rates = {link_bps(nodes[n].defaultIntf()) if n in nodes else None for n in spec.hosts}
    if len(rates) != 1 or None in rates:
        raise ScenarioError(
            "run.time_dilation: auto on a Mininet network takes the factor from the ranks' links "
            "(host_link_gbps over their TCLink bw), and they do not all have one rate; give "
            "the factor as a number"
        )
    (bps,) = rates
    assert bps is not None
    tdf = max(1.0, spec.rank_rate_bps / bps)
    mbps = bps / 1e6
    return TdfChoice(tdf, "mininet links", peak_bps, bound_by=f"the hosts' links: {mbps:g} Mb/s")


class MininetEngineBackend(EngineBackend):
    """The engine on a user's started Mininet network."""

    name = "mininet"

    def check(self, scenario: Scenario, options: BackendOptions) -> None:
        from fabrics.user_mininet import check_network

        del options
        net = _NETWORK.get()
        if net is None:
            raise ScenarioError(NO_NETWORK)
        assert isinstance(scenario.fabric, MininetSpec)
        check_network(net, scenario.fabric)
        refuse_engine_entropy(scenario)
        if scenario.engine.send_path != "udp_gso":
            raise ScenarioError("engine.send_path: a Mininet network's hosts use udp_gso")
        need_root()

    def timescale(self, request: TimescaleRequest) -> TdfChoice:
        return mininet_timescale(request)

    def open(self, context: BackendContext) -> Session:
        from fabrics.user_mininet import attach

        spec = context.scenario.fabric
        assert isinstance(spec, MininetSpec)
        net = _NETWORK.get()
        if net is None:
            raise ScenarioError(NO_NETWORK)
        context.options.say(f"taking {spec.ranks} hosts of the Mininet network")
        live = attach(net, spec, context.tdf, prefix=context.options.fabric_prefix)
        context.stack.callback(_give_back, live, context)
        context.interrupts.check()
        return MininetSession(context, live)


def _give_back(live: Any, context: BackendContext) -> None:
    with signals_deferred():
        removed = live.close()
    context.options.say(f"network given back ({len(removed)} items released)")
