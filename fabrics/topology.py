"""A ClosSpec turned into plain data: nodes, cables, interface names, addresses, ECMP routes.

Nothing here touches the machine, so tests check addressing, reachability and next-hop sets
without root. Hosts are h0, h1, ... in rank order; leaves l<i>, spines s<i>, super spines c<i>.
Addressing: the hosts of global leaf i live in 10.<i // 256>.<i % 256>.0/24 (one /31 per host
cable, leaf side even, host odd); switch-to-switch cables get /31s from 10.128.0.0/9.

`Topology.path` gives the links a UDP flow crosses. With a fixed ECMP hash seed (the default; the
backend writes each router's seed to its net.ipv4.fib_multipath_hash_seed) it reproduces the
kernel's own next-hop choice (fabrics/ecmp.py), provided the sender uses unconnected UDP sockets;
with seed 0 the kernel picks a random key and `path` is a model with the same spreading
statistics only.

Each router hashes with its own seed (Topology.router_seed), derived from the fabric's: with one
seed everywhere a spine repeats its leaf's hash-threshold choice, so of a leaf's 8 uplinks (2
spines x 4 parallel links) the flows through uplink k of a spine can only take its downlink
k // 2: half of the spine-to-leaf links carry nothing (hash polarization). Routers avoid that
with a per-router hash input, Cisco's "universal" load-sharing algorithm with a unique ID per
router (Cisco IOS CEF, `ip cef load-sharing algorithm universal <id>`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import threading
import zlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from fabrics.ecmp import hash_threshold_index, l4_multipath_hash
from fabrics.spec import DEFAULT_PRIORITY_DSCPS, ClosSpec, TierSpec

Role = Literal["host", "leaf", "spine", "super_spine"]
IFNAME_MAX = 15  # IFNAMSIZ - 1 (include/uapi/linux/if.h)
HOST_IFNAME = "eth0"
HOST_NET = ipaddress.IPv4Network("10.0.0.0/9")
FABRIC_NET = ipaddress.IPv4Network("10.128.0.0/9")
ROCE_UDP_DPORT = 4791  # IANA "roce" (RoCEv2)
UDP_PROTO = 17


@dataclass(frozen=True)
class Node:
    name: str
    role: Role
    pod: int


@dataclass(frozen=True)
class Port:
    """One end of a cable: an interface on a node with its address."""

    node: str
    ifname: str
    address: ipaddress.IPv4Interface


@dataclass(frozen=True)
class Cable:
    """A full-duplex link between two ports (a veth pair), with its rate in each direction."""

    a: Port
    b: Port
    rate_bps: float


@dataclass(frozen=True)
class Link:
    """One direction of a cable: what a flow crosses and what the ideal-time model charges."""

    name: str
    src: str
    dst: str
    rate_bps: float
    src_ifname: str
    dst_ifname: str


@dataclass(frozen=True)
class NextHop:
    gateway: ipaddress.IPv4Address
    ifname: str
    peer: str


@dataclass(frozen=True)
class Route:
    """A static route; more than one next hop makes it an ECMP route."""

    prefix: ipaddress.IPv4Network
    nexthops: tuple[NextHop, ...]


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]
    cables: tuple[Cable, ...]
    routes: dict[str, tuple[Route, ...]]
    tiers: dict[str, TierSpec]
    mtu_bytes: int
    host_buffer_bytes: int = 4_194_304
    link_delay_s: float = 0.0
    ecmp_hash_seed: int = 1
    link_loss: dict[str, float] = field(default_factory=dict)  # egress port -> drop share
    priority_dscps: tuple[int, ...] = (
        DEFAULT_PRIORITY_DSCPS  # served in strict priority at every port (CNPs)
    )
    ecmp_seed_per_router: bool = True  # each router its own seed (no polarization), see above

    def router_seed(self, node: str) -> int:
        """The hash seed `node` forwards with: the fabric's, or one drawn from it and the
        router's name (never 0, which would mean a random kernel key)."""
        if not self.ecmp_hash_seed or not self.ecmp_seed_per_router:
            return self.ecmp_hash_seed
        seed = self._router_seeds.get(node)
        if seed is None:
            seed = self._router_seeds[node] = (
                zlib.crc32(f"{self.ecmp_hash_seed}:{node}".encode()) or 1
            )
        return seed

    @cached_property
    def _router_seeds(self) -> dict[str, int]:
        return {}

    @cached_property
    def hosts(self) -> tuple[str, ...]:
        """Host names in rank order (rank r is hosts[r])."""
        return tuple(n.name for n in self.nodes if n.role == "host")

    @cached_property
    def routers(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes if n.role != "host")

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def ports(self) -> dict[str, tuple[Port, ...]]:
        """Every node's ports, in cable order."""
        out: dict[str, list[Port]] = {n.name: [] for n in self.nodes}
        for cable in self.cables:
            out[cable.a.node].append(cable.a)
            out[cable.b.node].append(cable.b)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def links(self) -> dict[tuple[str, str], Link]:
        """Directed links keyed by (node, egress interface)."""
        out: dict[tuple[str, str], Link] = {}
        for cable in self.cables:
            for s, d in ((cable.a, cable.b), (cable.b, cable.a)):
                name = f"{s.node}:{s.ifname}->{d.node}"
                out[(s.node, s.ifname)] = Link(
                    name, s.node, d.node, cable.rate_bps, s.ifname, d.ifname
                )
        return out

    def host_address(self, host: str) -> ipaddress.IPv4Address:
        address = self._host_addresses.get(host)
        if address is None:  # one object per host (IPv4Interface.ip makes a new one per call)
            address = self._host_addresses[host] = self.ports[host][0].address.ip
        return address

    @cached_property
    def _host_addresses(self) -> dict[str, ipaddress.IPv4Address]:
        return {}

    @cached_property
    def _host_by_address(self) -> dict[ipaddress.IPv4Address, str]:
        return {self.host_address(h): h for h in self.hosts}

    def path(
        self,
        src: str,
        dst: str,
        sport: int,
        dport: int = ROCE_UDP_DPORT,
        *,
        remember: bool = True,
    ) -> tuple[Link, ...]:
        """Directed links a UDP flow from host `src` to host `dst` crosses: the kernel's own
        ECMP choice when the seed is fixed, else an ideal uniform hash. `remember`: keep the
        hashes for the next call with this 5-tuple (not for a one-off probe: the schedule's
        balanced source ports try up to 256 per queue pair, 74k entries kept for nothing in
        moe_mix)."""
        if src == dst:
            return ()
        src_ip, dst_ip = self.host_address(src), self.host_address(dst)
        hops: list[Link] = []
        node, ifname = src, HOST_IFNAME
        for _ in range(len(self.nodes)):
            link = self.links[(node, ifname)]
            hops.append(link)
            node = link.dst
            if node == dst:
                return tuple(hops)
            hop = self.hop(node, src_ip, dst_ip, sport, dport, remember=remember)
            if hop is None:
                break
            ifname = hop.ifname
        raise ValueError(f"no route from {src} to {dst} at {node}")

    def hop(
        self,
        node: str,
        src_ip: ipaddress.IPv4Address,
        dst_ip: ipaddress.IPv4Address,
        sport: int,
        dport: int = ROCE_UDP_DPORT,
        *,
        remember: bool = False,
    ) -> NextHop | None:
        """The next hop router `node` picks for a UDP 5-tuple (path's and the simulator's
        switches' one choice). Each router hashes with its own seed (router_seed: the fabric's,
        or one per router), and only where the route has a choice (one next hop reads no hash);
        `remember` keeps the hash (path's)."""
        route = self.lookup(node, dst_ip)
        mhash, flow = 0, b""
        if route is not None and len(route.nexthops) > 1:
            if not self.ecmp_hash_seed:
                flow = flow_key(src_ip, dst_ip, sport, dport)
            elif remember:
                mhash = self._flow_hash(src_ip, dst_ip, sport, dport, self.router_seed(node))
            else:
                mhash = self.flow_hash(src_ip, dst_ip, sport, dport, node=node)
        return self.next_hop(node, dst_ip, mhash, flow)

    def flow_hash(
        self,
        src_ip: ipaddress.IPv4Address,
        dst_ip: ipaddress.IPv4Address,
        sport: int,
        dport: int = ROCE_UDP_DPORT,
        node: str | None = None,
    ) -> int:
        """The kernel's multipath hash of a UDP 5-tuple (the same both ways: it is symmetric),
        at router `node` (its own seed), or with the fabric's seed when no node is given (a
        flow's identity, as the simulator's route caches key it). Not remembered: its callers
        (the simulator's switches and queue pairs) ask once per 5-tuple and keep the answer."""
        seed = self.ecmp_hash_seed if node is None else self.router_seed(node)
        return l4_multipath_hash(src_ip, dst_ip, UDP_PROTO, sport, dport, seed)

    def _flow_hash(
        self,
        src_ip: ipaddress.IPv4Address,
        dst_ip: ipaddress.IPv4Address,
        sport: int,
        dport: int,
        seed: int,
    ) -> int:
        """l4_multipath_hash, remembered for `path`: with one seed for the fabric a flow's hash
        is the same at every router it meets (siphash in Python was 8% of a 1,024-rank
        flow-level run)."""
        key = (src_ip, dst_ip, sport, dport, seed)
        mhash = self._hashes.get(key)
        if mhash is None:
            mhash = self._hashes[key] = l4_multipath_hash(
                src_ip, dst_ip, UDP_PROTO, sport, dport, seed
            )
        return mhash

    @cached_property
    def _hashes(
        self,
    ) -> dict[tuple[ipaddress.IPv4Address, ipaddress.IPv4Address, int, int, int], int]:
        return {}

    @cached_property
    def _routes_to(self) -> dict[tuple[str, ipaddress.IPv4Address], Route | None]:
        return {}

    def next_hop(
        self, node: str, dst_ip: ipaddress.IPv4Address, mhash: int, flow: bytes
    ) -> NextHop | None:
        """The next hop a router picks for a packet (its flow hash `mhash`; `flow`, the 5-tuple
        as flow_key gives it, only matters with seed 0): the one choice Topology.path and the
        simulator's switches share, so both route every 5-tuple as the kernel does."""
        route = self.lookup(node, dst_ip)
        if route is None:
            return None
        choices = route.nexthops
        if len(choices) == 1:
            return choices[0]
        if self.ecmp_hash_seed:
            return choices[hash_threshold_index(mhash, len(choices))]
        return _ecmp_choice(node, flow, choices)

    def lookup(self, node: str, dst: ipaddress.IPv4Address) -> Route | None:
        """Longest-prefix match in a node's routes, counting directly attached /31s first
        (remembered per node and address: the routes never change in a Topology)."""
        key = (node, dst)
        cache = self._routes_to
        if key not in cache:
            cache[key] = self._lookup(node, dst)
        return cache[key]

    def _lookup(self, node: str, dst: ipaddress.IPv4Address) -> Route | None:
        """The first attached port whose network holds `dst` (not its own address), else the
        longest matching prefix (the first of equals), found by masking `dst` once per prefix
        length instead of testing every route (a super spine at 16,384 ranks has 512 routes
        and 1,024 ports)."""
        address = int(dst)
        attached, routed = self._prefix_index[node]
        found: tuple[int, Port] | None = None
        for mask, by_network in attached:
            for index, port in by_network.get(address & mask, ()):
                if port.address.ip != dst:
                    if found is None or index < found[0]:
                        found = (index, port)
                    break
        if found is not None:
            port = found[1]
            peer = self.links[(node, port.ifname)].dst
            return Route(port.address.network, (NextHop(dst, port.ifname, peer),))
        for mask, routes_by_network in routed:
            route = routes_by_network.get(address & mask)
            if route is not None:
                return route
        return None

    @cached_property
    def _prefix_index(
        self,
    ) -> dict[
        str,
        tuple[
            list[tuple[int, dict[int, list[tuple[int, Port]]]]],
            list[tuple[int, dict[int, Route]]],
        ],
    ]:
        """Per node: its attached networks (mask, {network: [(port index, port)]}) and its
        routes (mask, {network: first route}), each longest prefix first."""
        out = {}
        for node in self.node_by_name:
            attached: dict[int, dict[int, list[tuple[int, Port]]]] = {}
            for index, port in enumerate(self.ports[node]):
                network = port.address.network
                by_network = attached.setdefault(int(network.netmask), {})
                by_network.setdefault(int(network.network_address), []).append((index, port))
            routed: dict[int, dict[int, Route]] = {}
            for route in self.routes.get(node, ()):
                by_prefix = routed.setdefault(int(route.prefix.netmask), {})
                by_prefix.setdefault(int(route.prefix.network_address), route)
            out[node] = (
                sorted(attached.items(), reverse=True),
                sorted(routed.items(), reverse=True),
            )
        return out


def flow_key(
    src_ip: ipaddress.IPv4Address, dst_ip: ipaddress.IPv4Address, sport: int, dport: int
) -> bytes:
    """A UDP 5-tuple as the seed-0 model hashes it (one direction)."""
    return f"{src_ip},{dst_ip},{UDP_PROTO},{sport},{dport}".encode()


def _ecmp_choice(node: str, flow: bytes, nexthops: tuple[NextHop, ...]) -> NextHop:
    """Seed 0 (kernel-random key): an ideal uniform hash per router."""
    if len(nexthops) == 1:
        return nexthops[0]
    digest = hashlib.blake2b(flow, digest_size=8, key=node.encode()[:64]).digest()
    return nexthops[int.from_bytes(digest, "big") % len(nexthops)]


def leaf_prefix(leaf_index: int) -> ipaddress.IPv4Network:
    base = int(HOST_NET.network_address) + leaf_index * 256
    return ipaddress.IPv4Network((base, 24))


def build_clos(spec: ClosSpec) -> Topology:
    """The Topology of a ClosSpec (names, addresses and ECMP routes; no side effects)."""
    if spec.leaves * spec.pods * 256 > HOST_NET.num_addresses:
        raise ValueError(f"leaves: {spec.leaves * spec.pods} leaves exceed the 10.0.0.0/9 plan")
    host_bps = spec.rank_rate_bps
    fabric_bps = spec.port_rate_bps
    nodes: list[Node] = []
    cables: list[Cable] = []
    leaf_of_host: dict[str, int] = {}
    fabric_pool = iter(range(int(FABRIC_NET.network_address), int(FABRIC_NET.broadcast_address), 2))

    def port(node: str, ifname: str, ip: int) -> Port:
        if len(ifname) > IFNAME_MAX:
            raise ValueError(f"interface name {ifname!r} exceeds {IFNAME_MAX} characters")
        return Port(node, ifname, ipaddress.IPv4Interface((ip, 31)))

    def switch_cable(a: str, b: str, k: int) -> Cable:
        suffix = f"-{k}" if spec.parallel_links > 1 else ""
        try:
            base = next(fabric_pool)
        except StopIteration:
            raise ValueError("parallel_links: too many fabric links for 10.128.0.0/9") from None
        return Cable(
            port(a, f"{a}-{b}{suffix}", base), port(b, f"{b}-{a}{suffix}", base + 1), fabric_bps
        )

    rank = 0
    leaves_by_pod: list[list[str]] = []
    spines_by_pod: list[list[str]] = []
    for pod in range(spec.pods):
        leaves_by_pod.append([])
        for li in range(spec.leaves):
            g = pod * spec.leaves + li
            leaf = f"l{g}"
            leaves_by_pod[pod].append(leaf)
            base = int(leaf_prefix(g).network_address)
            for k in range(spec.hosts_per_leaf):
                host = f"h{rank}"
                nodes.append(Node(host, "host", pod))
                leaf_of_host[host] = g
                cables.append(
                    Cable(
                        port(leaf, f"{leaf}-{host}", base + 2 * k),
                        port(host, HOST_IFNAME, base + 2 * k + 1),
                        host_bps,
                    )
                )
                rank += 1
    for pod in range(spec.pods):
        for leaf in leaves_by_pod[pod]:
            nodes.append(Node(leaf, "leaf", pod))
        spines_by_pod.append([])
        for si in range(spec.spines):
            spine = f"s{pod * spec.spines + si}"
            spines_by_pod[pod].append(spine)
            nodes.append(Node(spine, "spine", pod))
            for leaf in leaves_by_pod[pod]:
                for k in range(spec.parallel_links):
                    cables.append(switch_cable(leaf, spine, k))
    for ci in range(spec.super_spines):
        core = f"c{ci}"
        nodes.append(Node(core, "super_spine", -1))
        for pod in range(spec.pods):
            for spine in spines_by_pod[pod]:
                for k in range(spec.parallel_links):
                    cables.append(switch_cable(spine, core, k))

    bare = Topology(tuple(nodes), tuple(cables), {}, spec.tiers, spec.mtu_bytes)
    return Topology(
        tuple(nodes),
        tuple(cables),
        _ecmp_routes(bare, spec.leaves * spec.pods),
        spec.tiers,
        spec.mtu_bytes,
        spec.host_buffer_bytes,
        spec.link_delay_us * 1e-6,
        spec.ecmp_hash_seed,
        dict(spec.link_loss),
        tuple(spec.priority_dscps),
        spec.ecmp_seed_per_router,
    )


_LAST_BUILT: list[tuple[ClosSpec, Topology]] = []  # the last (spec, topology) shared_clos built
_LAST_BUILT_LOCK = threading.Lock()


def shared_clos(spec: ClosSpec) -> Topology:
    """build_clos, built once for one spec object: the run's plan and its flow-level replay
    read the same fabric, and at 16,384 ranks its routes, route lookups and flow hashes take
    minutes to fill. Keyed by identity (a spec is frozen but holds dicts, so unhashable); only
    the last is kept, so a long-lived process holds at most one fabric."""
    with _LAST_BUILT_LOCK:
        if _LAST_BUILT and _LAST_BUILT[0][0] is spec:
            return _LAST_BUILT[0][1]
        topology = build_clos(spec)
        _LAST_BUILT[:] = [(spec, topology)]
        return topology


def cable_named(topo: Topology, ifname: str) -> Cable:
    """The cable with a switch-side interface called `ifname` (l0-s1, s1-l0, l0-h3, ...)."""
    for cable in topo.cables:
        for end in (cable.a, cable.b):
            if end.ifname == ifname and topo.node_by_name[end.node].role != "host":
                return cable
    raise ValueError(
        f"no switch interface {ifname!r} in this fabric (e.g. {topo.cables[-1].a.ifname})"
    )


def routes_without(topo: Topology, down: Iterable[Cable]) -> dict[str, tuple[Route, ...]]:
    """Every node's routes with `down` cables out of the graph (what a converged control plane
    would install); a leaf prefix no path reaches has no route at that node."""
    leaves = sum(1 for n in topo.nodes if n.role == "leaf")
    return _ecmp_routes(topo, leaves, frozenset(down))


def _ecmp_routes(
    topo: Topology, leaf_count: int, down: frozenset[Cable] = frozenset()
) -> dict[str, tuple[Route, ...]]:
    """Per node: a default route for hosts; for routers, one ECMP route per remote leaf prefix
    over every neighbor on a shortest path (parallel cables are separate next hops)."""
    neighbors: dict[str, list[tuple[Port, Port]]] = {n: [] for n in topo.routers}
    for cable in topo.cables:
        if cable in down:
            continue
        if cable.a.node in neighbors and cable.b.node in neighbors:
            neighbors[cable.a.node].append((cable.a, cable.b))
            neighbors[cable.b.node].append((cable.b, cable.a))
    routes: dict[str, list[Route]] = {n: [] for n in topo.routers}
    for g in range(leaf_count):
        leaf = f"l{g}"
        dist = {leaf: 0}
        queue = deque([leaf])
        while queue:
            n = queue.popleft()
            for _, far in neighbors[n]:
                if far.node not in dist:
                    dist[far.node] = dist[n] + 1
                    queue.append(far.node)
        for node in topo.routers:
            if node == leaf or node not in dist:
                continue
            hops = tuple(
                sorted(
                    (
                        NextHop(far.address.ip, near.ifname, far.node)
                        for near, far in neighbors[node]
                        if dist.get(far.node) == dist[node] - 1
                    ),
                    key=lambda h: int(h.gateway),
                )
            )
            routes[node].append(Route(leaf_prefix(g), hops))
    out: dict[str, tuple[Route, ...]] = {k: tuple(v) for k, v in routes.items()}
    for host in topo.hosts:
        port = topo.ports[host][0]
        leaf_side = topo.links[(host, port.ifname)].dst
        gw = ipaddress.IPv4Address(int(port.address.ip) - 1)
        out[host] = (
            Route(ipaddress.IPv4Network("0.0.0.0/0"), (NextHop(gw, port.ifname, leaf_side),)),
        )
    return out
