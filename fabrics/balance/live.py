"""Load balancing on a live fabric: checked before bring-up, attached after the queues, kept in
step with link events, read for its counters.

Every port of a switch whose tier balances gets the program at its ingress (a packet toward a
prefix of several next hops may arrive on any of them); each port's instance gets the switch's
parameters, next-hop sets and, for adaptive, the marker's queue state of each candidate port.
What the fabric creates is in its ledger: a clsact qdisc where the marker made none (deleting
it drops the ingress filter and so the program); the programs go with their namespaces at
teardown. Nothing is pinned.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.errors import ScenarioError
from fabrics.balance import program
from fabrics.balance.maps import (
    CHOOSE_LEAST_QUEUED,
    COUNTERS,
    KEY0,
    MAX_NEXTHOPS,
    MAX_QUEUE_SLOTS,
    MAX_ROUTES,
    BalanceCounters,
    BalanceParams,
    hop_capacity,
    nexthop_sets,
    parse_cpu_list,
    queue_slots,
    route_slots,
)
from fabrics.ecn.bpf_syscall import BpfMap
from fabrics.ecn.markers import EbpfMarker, Marker
from fabrics.iproute import Cmd, run_grouped
from fabrics.ownership import Ledger
from fabrics.queues import EgressPort
from fabrics.spec import LoadBalancingSpec
from fabrics.topology import Cable, Route, Topology

POSSIBLE_CPUS = Path("/sys/devices/system/cpu/possible")


def balanced_tiers(topology: Topology) -> dict[str, LoadBalancingSpec]:
    """Tier name -> its load_balancing, for the tiers that do not leave it to ECMP."""
    return {
        name: tier.load_balancing
        for name, tier in topology.tiers.items()
        if tier.load_balancing.mode != "ecmp"
    }


def _key(tier: str) -> str:
    return f"fabric.{tier}.load_balancing.mode"


def check_balancing(topology: Topology, marker_name: str) -> None:
    """Refuse, before anything is made, what the program cannot do: more next hops or routes
    than it holds; adaptive without the eBPF marker's queue on every candidate port."""
    tiers = balanced_tiers(topology)
    for node in topology.routers:
        tier = topology.node_by_name[node].role
        if tier not in tiers:
            continue
        routes = topology.routes.get(node, ())
        widest = max((len(r.nexthops) for r in routes), default=0)
        if widest > MAX_NEXTHOPS:
            raise ScenarioError(
                f"{_key(tier)}: {tiers[tier].mode} balances over at most {MAX_NEXTHOPS} next "
                f"hops, and {node} has {widest} toward one destination"
            )
        if len(routes) > MAX_ROUTES:
            raise ScenarioError(
                f"{_key(tier)}: {tiers[tier].mode} holds at most {MAX_ROUTES} routes per switch, "
                f"and {node} has {len(routes)}"
            )
        if tiers[tier].mode != "adaptive":
            continue
        if marker_name != "ebpf":
            raise ScenarioError(
                f"{_key(tier)}: adaptive reads each egress port's queue from the eBPF marker, "
                f"and this fabric's marker is {marker_name} (use marker: ebpf)"
            )
        slots = queue_slots(routes)
        if len(slots) > MAX_QUEUE_SLOTS:
            raise ScenarioError(
                f"{_key(tier)}: adaptive watches at most {MAX_QUEUE_SLOTS} egress ports per "
                f"switch, and {node} has {len(slots)}"
            )
        settings = topology.tiers[tier]
        unmarked = [
            dev
            for dev in slots
            if not settings.ecn.enabled
            and topology.link_loss.get(dev, settings.loss_probability) <= 0
        ]
        if unmarked:
            raise ScenarioError(
                f"fabric.{tier}.ecn.enabled: adaptive load balancing reads the queue of the "
                f"marker on each egress port, and {node}:{unmarked[0]} runs none (ECN is off "
                "there)"
            )


@dataclass
class Switch:
    """One balanced switch: its program instances and what its map entries are made from."""

    node: str
    netns: str
    tier: str
    params: BalanceParams
    programs: list[program.PortProgram]
    route_slot: dict[ipaddress.IPv4Network, int]
    queue_slot: dict[str, int]
    rate_bps: dict[str, float]  # egress port -> its wall rate
    capacity: int  # next hops per route the program holds (its MAX_NEXTHOPS)

    @property
    def ifindex(self) -> dict[str, int]:
        return {p.dev: p.ifindex for p in self.programs}


@dataclass
class Balancer:
    """The balanced switches of a live fabric; their next-hop maps follow the routes the kernel
    has (LiveFabric.set_cable and reroute call in here)."""

    topology: Topology
    switches: dict[str, Switch]
    routes: dict[str, tuple[Route, ...]]
    dead: set[tuple[str, str]] = field(default_factory=set)  # (node, port) of down cables
    written: dict[str, set[ipaddress.IPv4Network]] = field(default_factory=dict)

    def write_routes(self, nodes: Iterable[str]) -> None:
        """Each node's next-hop sets into every one of its port programs."""
        for node in nodes:
            sw = self.switches.get(node)
            if sw is None:
                continue
            routes = self.routes.get(node, ())
            dead = {dev for n, dev in self.dead if n == node}
            earlier = self.written.setdefault(node, set())
            gone = earlier - {r.prefix for r in routes}
            sets = nexthop_sets(routes, sw.route_slot, sw.queue_slot, sw.rate_bps, dead, gone)
            ifindex = sw.ifindex
            entries = [(s.key(), s.value(ifindex, sw.capacity)) for s in sets]
            for prog in sw.programs:
                _update_all(prog.maps["nexthops"], entries)
            earlier.update(s.prefix for s in sets)

    def set_cable(self, cable: Cable, up: bool) -> None:
        """The switches at a cable's ends stop choosing its ports (or choose them again)."""
        ends = {(cable.a.node, cable.a.ifname), (cable.b.node, cable.b.ifname)}
        if up:
            self.dead -= ends
        else:
            self.dead |= ends
        self.write_routes(n for n, _ in sorted(ends))

    def reroute(self, routes: Mapping[str, tuple[Route, ...]]) -> None:
        """The routes every switch now has (a converged control plane's)."""
        self.routes = dict(routes)
        self.write_routes(sorted(self.switches))

    def counters(self) -> dict[str, BalanceCounters]:
        """Per balanced switch: its ports' counters summed."""
        cpus = parse_cpu_list(POSSIBLE_CPUS.read_text())
        size = (COUNTERS.size + 7) // 8 * 8 * cpus
        out: dict[str, BalanceCounters] = {}
        for node, sw in sorted(self.switches.items()):
            total = BalanceCounters()
            for prog in sw.programs:
                m = BpfMap(prog.maps["counters"])
                try:
                    total = total + BalanceCounters.unpack_per_cpu(m.lookup(KEY0, size), cpus)
                finally:
                    m.close()
            out[node] = total
        return out

    def metadata(self) -> dict[str, Any]:
        tiers: dict[str, Any] = {}
        for sw in self.switches.values():
            spec = self.topology.tiers[sw.tier].load_balancing
            tiers[sw.tier] = {
                "mode": spec.mode,
                "spray_order": spec.spray_order,
                "adaptive_granularity": spec.adaptive_granularity,
                "flowlet_gap_wall_us": sw.params.flowlet_gap_ns / 1e3,
                "switches": tiers.get(sw.tier, {}).get("switches", 0) + 1,
            }
        return {"engine": "ebpf tc ingress (fabrics/balance)", "tiers": tiers}


def _update_all(map_id: int, entries: Sequence[tuple[bytes, bytes]]) -> None:
    m = BpfMap(map_id)
    try:
        for key, value in entries:
            m.update(key, value)
    finally:
        m.close()


def attach_balancers(
    topology: Topology,
    netns: Mapping[str, str],
    ports: Sequence[EgressPort],
    marker: Marker,
    ledger: Ledger,
    delay_scale: float,
) -> Balancer | None:
    """Attach the balancer at every port of every switch of this server (`netns`) whose tier
    balances, and fill its maps; None when every tier is ECMP. After the marker is configured
    (adaptive reads its maps)."""
    tiers = balanced_tiers(topology)
    nodes = [n for n in topology.routers if n in netns and topology.node_by_name[n].role in tiers]
    if not nodes:
        return None
    check_balancing(topology, marker.name)
    params = {tier: BalanceParams.of(spec, delay_scale) for tier, spec in tiers.items()}
    # one variant per tier, as wide as the fabric's widest balanced route
    widths = [len(r.nexthops) for n in nodes for r in topology.routes.get(n, ())]
    capacity = hop_capacity(max(widths, default=2))
    objs = {
        tier: program.compiled_object(flowlets=p.needs_flowlets, capacity=capacity)
        for tier, p in params.items()
    }
    has_clsact = {
        (r.get("netns"), r.get("dev"))
        for r in ledger.resources
        if r.get("kind") == "qdisc" and r.get("parent") == "clsact"
    }
    cmds: list[Cmd] = []
    records: list[dict[str, Any]] = []
    for node in nodes:
        ns, tier = netns[node], topology.node_by_name[node].role
        for port in topology.ports[node]:
            if (ns, port.ifname) not in has_clsact:
                records.append(
                    {"kind": "qdisc", "netns": ns, "dev": port.ifname, "parent": "clsact"}
                )
                cmds.append(program.clsact_command(ns, port.ifname))
            cmds.append(program.attach_command(ns, port.ifname, objs[tier]))
    ledger.record(records)
    run_grouped(cmds)

    found = {
        node: program.port_programs(netns[node], [p.ifname for p in topology.ports[node]])
        for node in nodes
    }
    maps = program.map_ids([pid for by_dev in found.values() for pid, _ in by_dev.values()])
    rate = {(p.node, p.dev): p.rate_bps for p in ports}
    switches: dict[str, Switch] = {}
    for node in nodes:
        tier = topology.node_by_name[node].role
        routes = topology.routes.get(node, ())
        switches[node] = Switch(
            node,
            netns[node],
            tier,
            params[tier],
            [
                program.PortProgram(dev, ifindex, pid, maps[pid])
                for dev, (pid, ifindex) in found[node].items()
            ],
            route_slots(routes),
            queue_slots(routes),
            {p.ifname: rate[(node, p.ifname)] for p in topology.ports[node]},
            capacity,
        )
    balancer = Balancer(topology, switches, dict(topology.routes))
    balancer.write_routes(nodes)
    for sw in switches.values():
        _share_switch_state(sw)
        if sw.params.choice == CHOOSE_LEAST_QUEUED and isinstance(marker, EbpfMarker):
            _point_at_queues(sw, marker)
        for prog in sw.programs:
            _update_all(prog.maps["params"], [(KEY0, sw.params.pack())])
    return balancer


def _share_switch_state(sw: Switch) -> None:
    """Every port's `switch_turns` and `switch_flows` -> the first port's `turns` and
    `flowlets`: one round-robin turn per route and one flowlet table per switch."""
    owner = sw.programs[0]
    for outer, inner in (("switch_turns", "turns"), ("switch_flows", "flowlets")):
        shared = BpfMap(owner.maps[inner])
        try:
            for prog in sw.programs:
                _update_all(prog.maps[outer], [(KEY0, struct.pack("=I", shared.fd))])
        finally:
            shared.close()


def _point_at_queues(sw: Switch, marker: EbpfMarker) -> None:
    """Each program's `queues` slot k -> the marker `state` map of the switch's port k."""
    for dev, slot in sw.queue_slot.items():
        state = BpfMap(marker.maps[(sw.netns, dev)].state_map_id)
        try:
            entry = [(struct.pack("=I", slot), struct.pack("=I", state.fd))]
            for prog in sw.programs:
                _update_all(prog.maps["queues"], entry)
        finally:
            state.close()
