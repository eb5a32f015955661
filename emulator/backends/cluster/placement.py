"""Which server hosts what: a ClusterSpec and the scenario's fabric turned into each server's share.

Toward a DUT: a server owns the interfaces it names, and their ranks run there; the ranks of
different servers reach each other through the DUT, as on one machine. Emulated Clos: a server
hosts the leaves it names with their hosts (rank r is host h<r> under
leaf r // hosts_per_leaf), the spines and super spines it names (those named by none go to the
first server); the cables between servers are VXLAN tunnels over the servers' underlays
(fabrics/vxlan.py plan_parts, which every server could compute alike). A server's namespaces
are named with the run's prefix and its own name (emu-a-h0), so several servers can share one
machine, as in the tests. Pure: no Ray, no root.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from emulator.errors import ScenarioError
from emulator.scenario.cluster import ClusterSpec, ServerSpec
from fabrics.spec import ClosSpec, DutSpec
from fabrics.topology import Topology, build_clos
from fabrics.vxlan import FabricPart, Underlay, plan_parts

if TYPE_CHECKING:
    from emulator.backends.base import BackendOptions
    from emulator.scenario.model import Scenario


@dataclass(frozen=True)
class ServerShare:
    """One server's share of the run."""

    server: ServerSpec
    prefix: str  # its namespaces' name prefix
    ranks: tuple[int, ...]  # the ranks whose endpoints live here
    part: FabricPart | None = None  # clos: the nodes and tunnel ends it brings up
    ports: tuple[int, ...] = ()  # dut: its interfaces (indexes into fabric.interfaces)

    @property
    def name(self) -> str:
        return self.server.name


@dataclass(frozen=True)
class ClusterPlan:
    shares: tuple[ServerShare, ...]
    topology: Topology | None = None  # clos: the whole fabric

    def server_of_rank(self) -> dict[int, str]:
        return {r: s.name for s in self.shares for r in s.ranks}

    def share(self, name: str) -> ServerShare:
        return next(s for s in self.shares if s.name == name)

    def cross_cables(self) -> int:
        """Cables between servers (each has one tunnel end on each of its two servers)."""
        return sum(len(s.part.tunnels) for s in self.shares if s.part is not None) // 2


def cluster_address(cluster: ClusterSpec, override: str | None) -> str:
    """The Ray address the run joins: --cluster, else run.cluster.address."""
    if not cluster.servers:
        raise ScenarioError(
            "run.cluster.servers: a run over a cluster needs the servers and what each hosts"
        )
    address = override or cluster.address
    if not address:
        raise ScenarioError("run.cluster.address: give the Ray cluster's address (or --cluster)")
    return address


def plan_cluster(cluster: ClusterSpec, fabric: object, prefix: str) -> ClusterPlan:
    if not cluster.servers:
        raise ScenarioError(
            "run.cluster.servers: a run over a cluster needs the servers and what each hosts"
        )
    if isinstance(fabric, ClosSpec):
        return _plan_clos(cluster, fabric, prefix)
    if isinstance(fabric, DutSpec):
        return _plan_dut(cluster, fabric, prefix)
    raise ScenarioError(f"run.cluster: a {type(fabric).__name__} fabric cannot be split")


def _assign(owner: dict[str, str], key: str, node: str, server: str, known: set[str]) -> None:
    if node not in known:
        raise ScenarioError(f"{key}: the fabric has no {node}")
    if node in owner:
        raise ScenarioError(f"{key}: {node} is already on server {owner[node]}")
    owner[node] = server


def _plan_clos(cluster: ClusterSpec, spec: ClosSpec, prefix: str) -> ClusterPlan:
    topology = build_clos(spec)
    known = {n.name for n in topology.nodes}
    owner: dict[str, str] = {}
    hosts_of_leaf: dict[str, list[str]] = {}
    for rank, host in enumerate(topology.hosts):
        hosts_of_leaf.setdefault(f"l{rank // spec.hosts_per_leaf}", []).append(host)
    for i, server in enumerate(cluster.servers):
        base = f"run.cluster.servers[{i}]"
        for leaf in server.leaves:
            _assign(owner, f"{base}.leaves", f"l{leaf}", server.name, known)
            for host in hosts_of_leaf[f"l{leaf}"]:
                owner[host] = server.name
        for spine in server.spines:
            _assign(owner, f"{base}.spines", f"s{spine}", server.name, known)
        for core in server.super_spines:
            _assign(owner, f"{base}.super_spines", f"c{core}", server.name, known)
        if server.interfaces:
            raise ScenarioError(f"{base}.interfaces: a clos fabric has no interfaces to place")
    leaves = [n.name for n in topology.nodes if n.role == "leaf"]
    free = [leaf for leaf in leaves if leaf not in owner]
    if free:
        raise ScenarioError(
            f"run.cluster.servers: leaf {free[0][1:]} is on no server ({len(free)} leaves "
            "unplaced): every leaf goes with its hosts to one server"
        )
    first = cluster.servers[0].name
    for node in topology.routers:  # spines and super spines no server named
        owner.setdefault(node, first)
    underlay: dict[str, Underlay] = {
        s.name: (s.underlay.address, s.underlay.interface, s.underlay.netns)
        for s in cluster.servers
        if s.underlay is not None
    }
    for i, server in enumerate(cluster.servers):
        crosses = any(
            (owner[c.a.node] == server.name) != (owner[c.b.node] == server.name)
            for c in topology.cables
        )
        if crosses and server.underlay is None:
            raise ScenarioError(
                f"run.cluster.servers[{i}].underlay: server {server.name} has cables to other "
                "servers and needs the interface that carries them"
            )
    parts = plan_parts(topology, owner, underlay)
    shares = []
    for server in cluster.servers:
        ranks = tuple(r for r, host in enumerate(topology.hosts) if owner[host] == server.name)
        part = parts.get(server.name)
        if part is None:  # a server that hosts nothing
            raise ScenarioError(f"run.cluster.servers: server {server.name} hosts nothing")
        shares.append(ServerShare(server, f"{prefix}{server.name}-", ranks, part))
    return ClusterPlan(tuple(shares), topology)


def _plan_dut(cluster: ClusterSpec, spec: DutSpec, prefix: str) -> ClusterPlan:
    index = {name: p for p, name in enumerate(spec.interfaces)}
    owner: dict[int, str] = {}
    shares = []
    for i, server in enumerate(cluster.servers):
        key = f"run.cluster.servers[{i}]"
        if server.leaves or server.spines or server.super_spines or server.underlay:
            raise ScenarioError(f"{key}: a dut fabric is split by interfaces, not by switches")
        for name in server.interfaces:
            if name not in index:
                raise ScenarioError(f"{key}.interfaces: {name} is not one of fabric.interfaces")
            port = index[name]
            if port in owner:
                raise ScenarioError(f"{key}.interfaces: {name} is already on server {owner[port]}")
            owner[port] = server.name
        ports = tuple(sorted(index[name] for name in server.interfaces))
        if not ports:
            raise ScenarioError(f"{key}.interfaces: server {server.name} owns no interface")
        ranks = tuple(r for r in range(spec.rank_count) if spec.port_of(r) in ports)
        shares.append(ServerShare(server, f"{prefix}{server.name}-", ranks, None, ports))
    free = [name for p, name in enumerate(spec.interfaces) if p not in owner]
    if free:
        raise ScenarioError(
            f"run.cluster.servers: interface {free[0]} is on no server ({len(free)} unplaced)"
        )
    return ClusterPlan(tuple(shares))


def cluster_of(scenario: Scenario, options: BackendOptions) -> ClusterSpec:
    """The scenario's cluster at the address the command line gives, else the scenario's."""
    cluster = scenario.run.cluster
    return dataclasses.replace(cluster, address=cluster_address(cluster, options.cluster))
