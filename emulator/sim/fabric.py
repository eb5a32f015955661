"""A scenario's Clos as simulated switches and ports, from the same Topology as the emulated one.

Every directed link of fabrics.topology.Topology becomes a Port named as the emulated fabric
names the interface (node, ifname) with the same rate, buffer, ECN law, loss and delay
(fabrics.queues.egress_ports computes them for both). Switches forward hop by hop with the
topology's own next-hop choice (Topology.next_hop, the kernel's ECMP hash), so a flow crosses the
links the emulated fabric would put it on; the switches of a tier whose load_balancing mode is
not ecmp choose among the same route's next hops with a balancer (emulator/sim/balance.py). With
PFC on, each switch ingress keeps the HPCC ns-3 accounting (emulator.sim.port.PfcIngress)
against the switch's shared buffer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import random
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from emulator.errors import ScenarioError
from emulator.sim import native
from emulator.sim.balance import Balancer, make_balancer
from emulator.sim.engine import Simulator
from emulator.sim.nodes import Host
from emulator.sim.port import Frame, PfcIngress, Port, SharedBuffer
from emulator.transport.events import TransportEvent
from emulator.transport.marking import EcnMarker
from emulator.transport.params import EcnMarkingParams
from emulator.transport.wire import ECN_ECT0, ECN_NOT_ECT
from fabrics.queues import egress_ports
from fabrics.spec import PFC_A_SHIFT, LoadBalancingSpec, TierSpec
from fabrics.topology import Cable, Route, Topology, routes_without


@dataclass(frozen=True)
class SimFabricParams:
    """What the simulator adds to the topology (fabric keys only it takes)."""

    pfc: bool = True
    switch_latency_s: float = 0.0
    ecn_mark_on_arrival: bool = False  # fabric.ecn_mark_point: departure unless arrival
    data_dscp: int = 26
    ack_dscp: int = 26  # transport.ack_dscp: ACKs and NAKs keep their data's class by default
    cnp_dscp: int = 48
    # ECN fields data, ACKs and NAKs, CNPs leave with (transport.data_ecn, ack_ecn, cnp_ecn)
    ecn_bits: tuple[int, int, int] = (ECN_ECT0, ECN_NOT_ECT, ECN_NOT_ECT)
    # every packet as real IPv4/RoCEv2 bytes (a packet capture needs them; slower)
    wire_bytes: bool = False
    # sim.draw_seed: salts the ports' draws and the switches' balancing draws (spray, flowlet,
    # adaptive ties), never the flows' hashed paths
    draw_seed: int = 0
    # sim.native_fabric: the fabric in C (emulator/sim/native.py) when it can run it ("auto"),
    # always ("on": refuse when it cannot), never ("off": the Python fabric)
    native: str = "auto"


class Switch:
    """Forwards each frame to the egress port the topology's routes and ECMP hash pick (or, with
    a `balancing` mode other than ecmp, its balancer picks among the route's next hops), after
    the switch latency; with PFC on, charges data frames to their ingress first.

    ECMP caches the chosen port per 5-tuple: (source, destination, UDP source port, direction),
    not by the hash the host stamps on the frame (frame.mhash, computed per queue pair at its
    set-up): a packet whose source port differs from its queue pair's (per-packet entropy) gets
    its own port's hash, as the kernel gives it, whatever the host stamped. The other modes cache
    the route's next hops (the candidates) per destination host."""

    def __init__(
        self,
        sim: Simulator,
        name: str,
        topology: Topology,
        latency_s: float,
        balancing: LoadBalancingSpec | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.sim = sim
        self.name = name
        self.topology = topology  # its routes change with link events
        self.latency_s = latency_s
        self.egress: dict[str, Port] = {}  # ifname -> port
        self.ingress: dict[Port, PfcIngress] = {}  # upstream port -> its PFC account
        self.addresses: dict[str, ipaddress.IPv4Address] = {}
        self._cache: dict[tuple[str, str, int, bool, int], Port | None] = {}
        self._candidates: dict[str, tuple[Port, ...]] = {}  # destination host -> next hops
        self.no_route = 0
        self.balancer: Balancer | None = None
        if balancing is not None:
            self.balancer = make_balancer(
                balancing, rng=rng if rng is not None else random.Random(0), ecmp=self._ecmp
            )

    def set_routes(self, routes: dict[str, tuple[Route, ...]]) -> None:
        self.topology = dataclasses.replace(self.topology, routes=routes)
        self._cache.clear()
        self._candidates.clear()

    def receive(self, frame: Frame, port: Port) -> None:
        if not frame.priority and self.ingress:
            ingress = self.ingress.get(port)
            if ingress is not None and not ingress.admit(frame):
                return  # headroom overflow: counted by the ingress
        if self.balancer is None:  # ECMP (as _ecmp, inline: the hot path)
            key = (frame.src, frame.dst, frame.sport, frame.control, frame.dport)
            cache = self._cache
            if key in cache:
                out = cache[key]
            else:
                out = cache[key] = self._route(frame)
        else:
            out = self._balanced(frame, self.balancer)
        if out is None:
            self.no_route += 1
            if frame.ingress is not None:
                frame.ingress.release(frame.size_bytes)
                frame.ingress = None
            return
        if self.latency_s:
            self.sim.at(self.sim.now + self.latency_s, out.send, frame)
        else:
            out.send(frame)

    def egress_for(self, frame: Frame) -> Port | None:
        """The port `receive` sends `frame` to now (its balancer's draw included)."""
        return self._ecmp(frame) if self.balancer is None else self._balanced(frame, self.balancer)

    def next_hops(self, dst: str) -> tuple[Port, ...]:
        """The egress ports of this switch's route toward host `dst`, in the route's next-hop
        order (Topology.next_hop's index into it is the ECMP choice); cached until set_routes."""
        candidates = self._candidates.get(dst)
        if candidates is None:
            route = self.topology.lookup(self.name, self.addresses[dst])
            hops = () if route is None else route.nexthops
            egress = self.egress
            candidates = tuple(egress[h.ifname] for h in hops if h.ifname in egress)
            self._candidates[dst] = candidates
        return candidates

    def _balanced(self, frame: Frame, balancer: Balancer) -> Port | None:
        candidates = self._candidates.get(frame.dst)
        if candidates is None:
            candidates = self.next_hops(frame.dst)
        if len(candidates) > 1:
            return balancer.choose(frame, candidates, self.sim.now)
        return candidates[0] if candidates else None

    def _ecmp(self, frame: Frame) -> Port | None:
        """The ECMP hash's port for `frame`, cached per 5-tuple (what receive does inline)."""
        key = (frame.src, frame.dst, frame.sport, frame.control, frame.dport)
        cache = self._cache
        if key in cache:
            return cache[key]
        out = cache[key] = self._route(frame)
        return out

    def _route(self, frame: Frame) -> Port | None:
        dst_ip = self.addresses[frame.dst]
        src_ip = self.addresses[frame.src]
        ports = (frame.dport, frame.sport) if frame.control else (frame.sport, frame.dport)
        # Topology.path's choice, this router's (once per 5-tuple: receive caches the port)
        hop = self.topology.hop(self.name, src_ip, dst_ip, *ports)
        return None if hop is None else self.egress.get(hop.ifname)


@dataclass
class SimFabric:
    """The simulated Clos: hosts in rank order, switches, and every port by (node, ifname)."""

    sim: Simulator
    topology: Topology
    hosts: list[Host]
    switches: dict[str, Switch]
    ports: dict[tuple[str, str], Port]
    ingresses: list[PfcIngress]
    # which code ran the fabric: "native" (C), or "python" and why not native
    code: str = "python"

    @property
    def data_packets_taken_in_c(self) -> int:
        """Data packets the C fabric's receive queue pairs took on their common path, never
        handed to a Python receiver (emulator/sim/native_rqp.py); 0 with the Python fabric."""
        rx = getattr(self.sim, "rx", None)
        return rx.taken if rx is not None else 0

    @property
    def data_packets_sent_in_c(self) -> int:
        """Data packets the C fabric's NIC arbiters sent from their queue pairs' grants, never
        built by a Python sender (emulator/sim/native_sqp.py); 0 with the Python fabric."""
        tx = getattr(self.sim, "tx", None)
        return tx.sent if tx is not None else 0

    @property
    def dcqcn_timers_in_c(self) -> int:
        """DCQCN timers the C fabric ran for granted queue pairs whose reaction point it holds,
        never handed to Python (emulator/sim/native_sqp.py); 0 with the Python fabric."""
        tx = getattr(self.sim, "tx", None)
        return tx.timers if tx is not None else 0

    def host_address(self, rank: int) -> ipaddress.IPv4Address:
        return self.topology.host_address(self.hosts[rank].name)

    def cable_ports(self, cable: Cable) -> tuple[Port, Port]:
        return (
            self.ports[(cable.a.node, cable.a.ifname)],
            self.ports[(cable.b.node, cable.b.ifname)],
        )

    def reroute(self, nodes: Iterable[str], down: Iterable[Cable]) -> None:
        """Give `nodes` the routes of the fabric without the `down` cables."""
        routes = routes_without(self.topology, list(down))
        for name in nodes:
            switch = self.switches.get(name)
            if switch is not None:
                switch.set_routes(routes)


def build_fabric(
    topology: Topology,
    params: SimFabricParams,
    *,
    seed: int,
    events: list[TransportEvent],
) -> SimFabric:
    """Ports, switches and hosts of `topology`; every random draw (ECN marks, loss) comes from
    its own generator derived from `seed`, so a run is reproducible port by port. The fabric
    runs in C when params.native allows and it can (_native_unsupported), else in Python."""
    why = "sim.native_fabric: off"
    if params.native != "off":
        module, why = native.load_module()
        why = why or _native_unsupported(topology)
        if not why and module is not None:
            return _build(topology, params, seed, events, module)
        if params.native == "on":
            raise ScenarioError(f"sim.native_fabric: on, but the fabric cannot run in C: {why}")
    fabric = _build(topology, params, seed, events, None)
    fabric.code = f"python ({why})"
    return fabric


def _native_unsupported(topology: Topology) -> str:
    """Why the C fabric cannot run `topology` ("" when it can)."""
    for role, tier in topology.tiers.items():
        if tier.load_balancing is not None and tier.load_balancing.mode != "ecmp":
            return f"fabric.{role}.load_balancing.mode {tier.load_balancing.mode} (C: ecmp only)"
    if len(topology.hosts) >= native.MAX_HOSTS:
        return f"{len(topology.hosts)} hosts (C: below {native.MAX_HOSTS})"
    return ""


def _build(
    topology: Topology,
    params: SimFabricParams,
    seed: int,
    events: list[TransportEvent],
    module: ModuleType | None,
) -> SimFabric:
    """The fabric in Python (`module` None) or in C (native.py's objects in the same places)."""
    specs = list(egress_ports(topology, _no_netns(topology), 1.0, 1.0))
    feeding = _feeding(topology) if params.pfc else {}
    sim: Any
    if module is None:
        sim = Simulator()
    else:
        pools = sum(1 for name in feeding if _tier(topology, name).pfc_xoff_bytes is None)
        accounts = sum(len(links) for links in feeding.values())
        sim = native.NativeSimulator(module, len(specs), len(topology.routers), accounts, pools)
    ports: dict[tuple[str, str], Any] = {}
    for index, spec in enumerate(specs):
        name = f"{spec.node}:{spec.dev}"
        is_host = topology.node_by_name[spec.node].role == "host"
        law = None
        if spec.ecn is not None:
            law = EcnMarkingParams(spec.ecn.kmin_bytes, spec.ecn.kmax_bytes, spec.ecn.pmax)
        settings: dict[str, Any] = {
            "rate_bps": spec.rate_bps,
            "delay_s": spec.delay_s,
            # a host NIC is pulled by its host when idle: nothing waits in it
            "buffer_bytes": 1 << 40 if is_host else spec.buffer_bytes,
            "mark_on_arrival": params.ecn_mark_on_arrival,
            "loss_probability": spec.loss_probability,
            "rng": random.Random(derive_seed(seed, name, "loss", params.draw_seed)),
            "lossless": params.pfc and not is_host,
        }
        mark_rng = random.Random(derive_seed(seed, name, "ecn", params.draw_seed))
        if module is None:
            marker = None if law is None else EcnMarker(law, mark_rng)
            ports[(spec.node, spec.dev)] = Port(sim, name, marker=marker, **settings)
        else:
            ports[(spec.node, spec.dev)] = native.NativePort.make(
                sim, index, name, law=law, mark_rng=mark_rng, **settings
            )
    addresses = {h: topology.host_address(h) for h in topology.hosts}
    hosts = [
        Host(
            sim,
            name,
            str(addresses[name]),
            events=events,
            dscp=params.data_dscp,
            ack_dscp=params.ack_dscp,
            cnp_dscp=params.cnp_dscp,
            ecn_bits=params.ecn_bits,
            wire_bytes=params.wire_bytes,
            priority_dscps=frozenset(topology.priority_dscps),
        )
        for name in topology.hosts
    ]
    switches: dict[str, Any] = {}
    for index, name in enumerate(topology.routers):
        tier = topology.tiers.get(topology.node_by_name[name].role)
        balancing = None if tier is None else tier.load_balancing
        rng = None
        if balancing is not None and balancing.mode != "ecmp":
            # the switch's own draws (spray, flowlet moves, adaptive ties), as a port's are
            rng = random.Random(derive_seed(seed, name, "balance", params.draw_seed))
        switch = Switch(sim, name, topology, params.switch_latency_s, balancing, rng)
        switch.addresses = addresses
        # in C, the Python switch only answers for the 5-tuples C has not routed yet
        switches[name] = switch if module is None else native.NativeSwitch(sim, index, switch)
    host_by_name = {h.name: h for h in hosts}
    for (node, dev), port in ports.items():
        link = topology.links[(node, dev)]
        port.peer = host_by_name.get(link.dst) or switches[link.dst]
        if node in host_by_name:
            host_by_name[node].attach(port)
        else:
            switches[node].egress[dev] = port
    ingresses = _pfc(topology, feeding, ports, switches, sim) if params.pfc else []
    if isinstance(sim, native.NativeSimulator):
        sim.connect(hosts, ports.values(), switches.values())
    fabric = SimFabric(sim, topology, hosts, switches, ports, ingresses)
    fabric.code = "python" if module is None else "native"
    return fabric


def _tier(topology: Topology, name: str) -> TierSpec:
    return topology.tiers[topology.node_by_name[name].role]


def _feeding(topology: Topology) -> dict[str, list[tuple[tuple[str, str], Any]]]:
    """Per switch, the links arriving at it (its PFC ingresses), in the topology's link order."""
    out: dict[str, list[tuple[tuple[str, str], Any]]] = {name: [] for name in topology.routers}
    for key, link in topology.links.items():
        if link.dst in out:
            out[link.dst].append((key, link))
    return out


def _pfc(
    topology: Topology,
    feeding: dict[str, list[tuple[tuple[str, str], Any]]],
    ports: dict[tuple[str, str], Any],
    switches: dict[str, Any],
    sim: Any,
) -> list[Any]:
    """One PFC account per switch ingress (each link arriving at a switch), per tier."""
    out: list[Any] = []
    for name, switch in switches.items():
        tier = _tier(topology, name)
        arriving = [(ports[key], link) for key, link in feeding[name]]
        headroom = {
            port: tier.headroom_for(link.rate_bps, topology.link_delay_s, topology.mtu_bytes)
            for port, link in arriving
        }
        static = tier.pfc_xoff_bytes
        pool = None
        if static is None:  # HPCC's dynamic threshold over the switch's shared buffer
            pool = SharedBuffer(tier.shared_buffer_bytes, sum(headroom.values()), PFC_A_SHIFT)
        for port, _link in arriving:
            account = (port, static or 0, tier.pfc_xon_offset_bytes, headroom[port], pool)
            ingress: Any
            if isinstance(sim, native.NativeSimulator):
                ingress = sim.ingress(len(out), *account)
            else:
                ingress = PfcIngress(*account)
            switch.ingress[port] = ingress
            out.append(ingress)
    return out


def _no_netns(topology: Topology) -> dict[str, str]:
    return {n.name: "" for n in topology.nodes}


def derive_seed(seed: int, name: str, purpose: str, draw: int = 0) -> int:
    """A seed for one port's (or QP's) generator from the run's seed and its name, so adding a
    port elsewhere does not change this one's draws (blake2b: stable across processes, unlike
    Python's string hash). `draw` (sim.draw_seed) salts it; 0 leaves the run.seed-only draws."""
    key = f"{seed}/{name}/{purpose}" + (f"/draw{draw}" if draw else "")
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
