"""How a simulated switch chooses among its equal-cost next hops: the tier's load_balancing mode
(fabrics/spec.py LoadBalancingSpec) other than ecmp, which the switch keeps on its own cached
hash path (emulator/sim/fabric.py Switch).

A balancer gets a frame, the egress ports of the switch's route toward the frame's destination
(`candidates`, in the route's next-hop order: Topology.next_hop indexes the same tuple, so index
i here is the hash's choice i) and the target time of the frame's arrival, and returns one of the
candidates. The switch asks only when there are at least two. Every random draw comes from the
switch's own generator (derive_seed(run.seed, switch, "balance", sim.draw_seed)), so a run is
reproducible and another seed draws otherwise, as the ports' ECN and loss draws are.

Every frame is balanced, data and control (ACK, NAK, CNP) alike: a switch that sprays or
balances adaptively does so for every packet of the traffic class it is configured for, and the
simulator carries a QP's ACKs and NAKs in its data's class (and CNPs, in their strict-priority
class, are given the same rule to keep one rule per tier). The reverse direction of a
connection is its own flow at each switch (another 5-tuple).

The registry BALANCERS (mode -> class) is what make_balancer reads; a new mode registers here.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from emulator.sim.port import Frame, Port
from fabrics.spec import LoadBalancingSpec

# The switch's ECMP choice for a frame (its cached hash of the 5-tuple; None: no route).
EcmpChoice = Callable[[Frame], Port | None]
FlowKey = tuple[str, str, int, bool, int]


class Balancer(Protocol):
    def choose(self, frame: Frame, candidates: tuple[Port, ...], now: float) -> Port: ...


class Spray:
    """Each packet to one of the equal-cost next hops, whatever its flow: drawn uniformly at
    random (random packet spraying, Dixit et al., "On the Impact of Packet Spraying in Data
    Center Networks", INFOCOM 2013) or the next in turn (round_robin). The turn is kept per
    destination host at this switch and starts at the route's first next hop, so a
    destination's packets visit next hops 0, 1, 2, ... and wrap; after a route change the turn
    goes on over the new, shorter or longer, list."""

    def __init__(self, spec: LoadBalancingSpec, rng: random.Random, ecmp: EcmpChoice) -> None:
        del ecmp  # a sprayed packet never takes its flow's hash into account
        self._rng = rng
        self._round_robin = spec.spray_order == "round_robin"
        self._turn: dict[str, int] = {}  # destination host -> the index of its next turn

    def choose(self, frame: Frame, candidates: tuple[Port, ...], now: float) -> Port:
        if self._round_robin:
            turn = self._turn.get(frame.dst, 0)
            self._turn[frame.dst] = turn + 1
            return candidates[turn % len(candidates)]
        return self._rng.choice(candidates)


class Flowlet:
    """Flowlet switching as LetFlow does it (Vanini et al., "Let It Flow: Resilient Asymmetric
    Load Balancing with Flowlet Switching", NSDI 2017): a table keyed by the flow (its 5-tuple:
    source, destination, UDP source port, and which way it goes) holds the flow's next hop and
    the time of its last packet here. A packet that arrives more than flowlet_gap_us after the
    flow's previous one starts a new flowlet, which takes a next hop drawn uniformly at random
    (possibly the same one); any other packet keeps its flowlet's hop, so a burst is never
    reordered as long as the gap exceeds the paths' delay difference (flowlets: Kandula et
    al., "Dynamic Load Balancing Without Packet Reordering", CCR 2007; the table at each
    switch: Alizadeh et al., CONGA, SIGCOMM 2014, section 3.4).

    A flow's first packet takes the ECMP hash's choice, so an idle fabric starts as ECMP. The
    table is ideal: one entry per flow with an exact timestamp, never evicted (CONGA's hardware
    hashes flows into 64K entries and ages them with a bit swept every gap, so its effective gap
    lies between one and two timeouts and colliding flows share an entry). When the routes
    change (a link event) a flow whose hop is no longer a candidate moves at its next packet,
    gap or not."""

    def __init__(self, spec: LoadBalancingSpec, rng: random.Random, ecmp: EcmpChoice) -> None:
        self._gap_s = spec.flowlet_gap_us * 1e-6  # the simulator runs in target time
        self._rng = rng
        self._ecmp = ecmp
        # flow -> [its next hop, its last packet's arrival, the candidates the hop is one of]
        self._flows: dict[FlowKey, list[Any]] = {}

    def choose(self, frame: Frame, candidates: tuple[Port, ...], now: float) -> Port:
        key = (frame.src, frame.dst, frame.sport, frame.control, frame.dport)
        entry = self._flows.get(key)
        if entry is None:
            out = self._first(frame, candidates)
            self._flows[key] = [out, now, candidates]
            return out
        out = entry[0]
        if now - entry[1] > self._gap_s or (
            # the routes changed since the flow's last packet and took its hop away
            entry[2] is not candidates and out not in candidates
        ):
            out = entry[0] = self._new(candidates)
        entry[1] = now
        entry[2] = candidates
        return out

    def _first(self, frame: Frame, candidates: tuple[Port, ...]) -> Port:
        out = self._ecmp(frame)
        return out if out is not None and out in candidates else self._new(candidates)

    def _new(self, candidates: tuple[Port, ...]) -> Port:
        return self._rng.choice(candidates)


class Adaptive(Flowlet):
    """Adaptive routing: the equal-cost next hop whose egress port holds the fewest bytes in its
    data queue at that instant (Port.queued_bytes: what waits, not the frame being serialized;
    the strict-priority CNP queue is not counted), for every packet (granularity packet, as
    per-packet adaptive routing in AI fabrics does: sonic-mgmt docs/testplan/ARS-test-plan.md)
    or only when a flowlet starts (granularity flowlet, with the flowlet mode's gap rule; a
    flow's first packet starts one, so it too takes the least-queued hop: CONGA's choice at a
    new flowlet, with the local queue as the congestion metric instead of CONGA's path
    feedback).

    Ties go to a seeded uniform draw among the tied next hops, not to the lowest index: an idle
    fabric's queues are all empty (a port that is only serializing one frame holds 0 bytes), and
    the lowest index would put every packet of an idle switch on its first next hop, an artefact
    of the tie rule rather than of adaptive routing; the draw makes an idle switch spray at
    random, and stays reproducible with the switch's seed."""

    def __init__(self, spec: LoadBalancingSpec, rng: random.Random, ecmp: EcmpChoice) -> None:
        super().__init__(spec, rng, ecmp)
        self._per_packet = spec.adaptive_granularity == "packet"

    def choose(self, frame: Frame, candidates: tuple[Port, ...], now: float) -> Port:
        if self._per_packet:
            return self._new(candidates)
        return super().choose(frame, candidates, now)

    def _first(self, frame: Frame, candidates: tuple[Port, ...]) -> Port:
        return self._new(candidates)

    def _new(self, candidates: tuple[Port, ...]) -> Port:
        least = min(port.queued_bytes for port in candidates)
        tied = [port for port in candidates if port.queued_bytes == least]
        return tied[0] if len(tied) == 1 else self._rng.choice(tied)


BALANCERS: dict[str, type[Spray] | type[Flowlet]] = {
    "spray": Spray,
    "flowlet": Flowlet,
    "adaptive": Adaptive,
}


def make_balancer(
    spec: LoadBalancingSpec, *, rng: random.Random, ecmp: EcmpChoice
) -> Balancer | None:
    """The balancer of a tier's mode, or None for ecmp (the switch's own cached hash path)."""
    if spec.mode == "ecmp":
        return None
    cls = BALANCERS.get(spec.mode)
    if cls is None:
        raise ValueError(f"load_balancing.mode: no simulated balancer for {spec.mode!r}")
    return cls(spec, rng, ecmp)


__all__ = ["BALANCERS", "Adaptive", "Balancer", "Flowlet", "Spray", "make_balancer"]
