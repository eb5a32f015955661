"""The in-memory fabric the integration tests drive the transport core through: build hosts,
switches and links from the simulator's nodes and ports (emulator.sim), run flows over them, read
back what happened.

Two shapes cover the tests and the first studies: `star` (every host on one switch, so N-to-1
traffic meets one bottleneck port) and `clos` (leaves and spines, ECMP over spines).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from emulator.sim.engine import Simulator
from emulator.sim.nodes import Host, Switch
from emulator.sim.port import Port
from emulator.transport.events import (
    CnpReceived,
    CnpSent,
    FlowCompleted,
    RateChanged,
    Retransmitted,
    TransportEvent,
)
from emulator.transport.marking import EcnMarker
from emulator.transport.params import EcnMarkingParams, TransportParams, hpcc_ecn_marking
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair


@dataclass(frozen=True)
class LinkSpec:
    """Every link of a fabric: rate, one-way propagation delay, switch port buffer, random loss
    (applied to every frame a port sends, both directions)."""

    rate_bps: float = 100e9
    delay_s: float = 1e-6
    buffer_bytes: int = 8_000_000  # per switch output port
    loss_probability: float = 0.0


@dataclass
class Flow:
    """One message from src to dst on its own QP pair."""

    flow_id: int
    src: str
    dst: str
    size_bytes: int
    start_s: float
    sport: int
    label: str
    sender: SendQueuePair
    receiver: ReceiveQueuePair
    completed: FlowCompleted | None = None


@dataclass
class Network:
    """Hosts, switches and ports by name, the flows added, and every transport event, in order."""

    sim: Simulator
    params: TransportParams
    rng: random.Random
    hosts: dict[str, Host] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    ports: dict[str, Port] = field(default_factory=dict)
    flows: list[Flow] = field(default_factory=list)
    events: list[TransportEvent] = field(default_factory=list)
    line_rate_bps: float = 100e9
    _next_qpn: Counter[str] = field(default_factory=Counter)

    # -- building ------------------------------------------------------------------------
    def add_host(self, name: str, address: str, *, wire_bytes: bool = False) -> Host:
        host = Host(
            self.sim,
            name,
            address,
            wire_bytes=wire_bytes,
            events=self.events,
            dscp=self.params.dscp,
            cnp_dscp=self.params.cnp_dscp,
        )
        self.hosts[name] = host
        return host

    def add_switch(self, name: str) -> Switch:
        switch = Switch(name, seed=self.rng.getrandbits(32))
        self.switches[name] = switch
        return switch

    def _port(
        self, name: str, link: LinkSpec, *, marking: EcnMarkingParams | None, buffer_bytes: int
    ) -> Port:
        marker = EcnMarker(marking, random.Random(self.rng.getrandbits(64))) if marking else None
        port = Port(
            self.sim,
            name,
            rate_bps=link.rate_bps,
            delay_s=link.delay_s,
            buffer_bytes=buffer_bytes,
            marker=marker,
            loss_probability=link.loss_probability,
            rng=random.Random(self.rng.getrandbits(64)),
        )
        self.ports[name] = port
        return port

    def connect_host(
        self, host: Host, switch: Switch, link: LinkSpec, marking: EcnMarkingParams | None
    ) -> None:
        up = self._port(f"{host.name}->{switch.name}", link, marking=None, buffer_bytes=1 << 40)
        down = self._port(
            f"{switch.name}->{host.name}", link, marking=marking, buffer_bytes=link.buffer_bytes
        )
        up.peer, down.peer = switch, host
        host.attach(up)
        switch.routes[host.name] = [down]

    def connect_switches(
        self, a: Switch, b: Switch, link: LinkSpec, marking: EcnMarkingParams | None
    ) -> tuple[Port, Port]:
        ab = self._port(
            f"{a.name}->{b.name}", link, marking=marking, buffer_bytes=link.buffer_bytes
        )
        ba = self._port(
            f"{b.name}->{a.name}", link, marking=marking, buffer_bytes=link.buffer_bytes
        )
        ab.peer, ba.peer = b, a
        return ab, ba

    # -- traffic -------------------------------------------------------------------------
    def add_flow(
        self,
        src: str,
        dst: str,
        size_bytes: int,
        *,
        start_s: float = 0.0,
        sport: int | None = None,
        label: str = "",
        payload: bytes | None = None,
        record_deliveries: bool = False,
        initial_psn: int | None = None,
    ) -> Flow:
        s, d = self.hosts[src], self.hosts[dst]
        self._next_qpn[src] += 1
        self._next_qpn[dst] += 1
        src_qpn = 0x100 + self._next_qpn[src] * 2
        dst_qpn = 0x101 + self._next_qpn[dst] * 2
        flow_id = len(self.flows)
        if sport is None:
            sport = 49152 + self.rng.randrange(16384)
        psn = self.rng.randrange(1 << 24)  # random initial PSNs exercise the 24-bit wrap
        if initial_psn is not None:
            psn = initial_psn
        sender = SendQueuePair(
            qpn=src_qpn,
            dest_qp=dst_qpn,
            params=self.params,
            line_rate_bps=self.line_rate_bps,
            initial_psn=psn,
            events=self.events,
        )
        receiver = ReceiveQueuePair(
            qpn=dst_qpn,
            remote_qp=src_qpn,
            params=self.params,
            initial_psn=psn,
            events=self.events,
            record_deliveries=record_deliveries,
        )
        s.add_sender(sender, dst=d, sport=sport)
        d.add_receiver(receiver, src=s, sport=sport)
        flow = Flow(flow_id, src, dst, size_bytes, start_s, sport, label, sender, receiver)
        self.flows.append(flow)
        self.sim.at(start_s, _post, s, sender, flow_id, size_bytes, payload)
        return flow

    def run(self, *, until_s: float) -> None:
        self.sim.run(until_s=until_s)
        done = {e.message_id: e for e in self.events if isinstance(e, FlowCompleted)}
        for flow in self.flows:
            flow.completed = done.get(flow.flow_id)

    # -- results -------------------------------------------------------------------------
    def count(self, kind: type) -> int:
        return sum(1 for e in self.events if isinstance(e, kind))

    def cnps_sent(self) -> int:
        return self.count(CnpSent)

    def cnps_received(self) -> int:
        return self.count(CnpReceived)

    def retransmissions(self) -> list[Retransmitted]:
        return [e for e in self.events if isinstance(e, Retransmitted)]

    def rate_changes(self) -> list[RateChanged]:
        return [e for e in self.events if isinstance(e, RateChanged)]


def star(
    n_hosts: int,
    *,
    params: TransportParams | None = None,
    link: LinkSpec | None = None,
    marking: EcnMarkingParams | None = None,
    seed: int = 1,
    wire_bytes: bool = False,
) -> Network:
    """n hosts h0..h{n-1} on one switch; the switch's port toward a receiver is the bottleneck of
    any N-to-1 traffic. ECN thresholds default to HPCC's for the link rate."""
    link = link or LinkSpec()
    net = Network(
        Simulator(), params or TransportParams(), random.Random(seed), line_rate_bps=link.rate_bps
    )
    marking = marking or hpcc_ecn_marking(link.rate_bps)
    sw = net.add_switch("sw")
    for i in range(n_hosts):
        host = net.add_host(f"h{i}", f"10.0.0.{i + 1}", wire_bytes=wire_bytes)
        net.connect_host(host, sw, link, marking)
    return net


def clos(
    *,
    leaves: int = 2,
    spines: int = 2,
    hosts_per_leaf: int = 4,
    params: TransportParams | None = None,
    link: LinkSpec | None = None,
    marking: EcnMarkingParams | None = None,
    seed: int = 1,
) -> Network:
    """A two-tier Clos: hosts h{leaf}_{i} on leaves, every leaf linked to every spine; traffic
    between leaves is spread over spines by ECMP on the UDP source port."""
    link = link or LinkSpec()
    net = Network(
        Simulator(), params or TransportParams(), random.Random(seed), line_rate_bps=link.rate_bps
    )
    marking = marking or hpcc_ecn_marking(link.rate_bps)
    leaf_sw = [net.add_switch(f"leaf{i}") for i in range(leaves)]
    spine_sw = [net.add_switch(f"spine{j}") for j in range(spines)]
    uplinks: dict[str, list[Port]] = {leaf.name: [] for leaf in leaf_sw}
    downlinks: dict[tuple[str, str], Port] = {}  # (spine, leaf) -> the spine's port to the leaf
    for leaf in leaf_sw:
        for spine in spine_sw:
            up, down = net.connect_switches(leaf, spine, link, marking)
            uplinks[leaf.name].append(up)
            downlinks[spine.name, leaf.name] = down
    for li, leaf in enumerate(leaf_sw):
        for i in range(hosts_per_leaf):
            host = net.add_host(f"h{li}_{i}", f"10.{li}.0.{i + 1}")
            net.connect_host(host, leaf, link, marking)
            for spine in spine_sw:
                spine.routes[host.name] = [downlinks[spine.name, leaf.name]]
            for other in leaf_sw:
                if other is not leaf:
                    other.routes[host.name] = uplinks[other.name]
    return net


def _post(
    host: Host, qp: SendQueuePair, message_id: int, size_bytes: int, payload: bytes | None
) -> None:
    host.post(qp, message_id=message_id, size_bytes=size_bytes, payload=payload)
