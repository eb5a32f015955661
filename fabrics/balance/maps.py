"""The balancer's maps as bytes, and the next-hop sets a switch's routes give (no side effects).

Layouts mirror balancer.c: `params` (struct balance_params), `nexthops` (an LPM trie keyed by
destination prefix, struct route_key -> struct nexthop_set), `counters` (per CPU, struct
balance_counters). A switch's routes are the Topology's (fabrics/topology.py), the same the
kernel holds as multipath routes; a next hop over a port that is down is left out, as the
kernel marks it dead (fabrics/netns.py LiveFabric.set_cable).
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabrics.spec import LoadBalancingSpec
from fabrics.topology import Route

# Bounds compiled into balancer.c (MAX_NEXTHOPS, MAX_QUEUE_SLOTS, MAX_ROUTES). A fabric's
# program holds as many next hops per route as its widest route needs, rounded up to a power of
# two (hop_capacity), at most MAX_NEXTHOPS.
MAX_NEXTHOPS = 64
MAX_QUEUE_SLOTS = 256
MAX_ROUTES = 4096
# Flows a port's flowlet table remembers (an LRU: a flow evicted while idle only starts its next
# flowlet as a new flow). 8192 x about 80 bytes per entry stays under 1 MB per port.
FLOWLET_ENTRIES = 8192

CHOOSE_RANDOM = 0
CHOOSE_ROUND_ROBIN = 1
CHOOSE_LEAST_QUEUED = 2

# struct balance_params: u32 enabled, choice, per_flowlet, first_ecmp; u64 flowlet_gap_ns
PARAMS = struct.Struct("=IIIIQ")
# struct nexthop: u32 ifindex, be32 gateway, u32 queue_slot, u32 pad, u64 drain q24
NEXTHOP = struct.Struct("=I4sIIQ")
SET_HEAD = struct.Struct("=II")  # struct nexthop_set: u32 count, u32 route_slot, then the hops
ROUTE_KEY = struct.Struct("=I4s")  # struct route_key: u32 prefixlen, be32 address
COUNTER_FIELDS = 6
COUNTERS = struct.Struct(f"={COUNTER_FIELDS}Q")  # struct balance_counters
KEY0 = struct.pack("=I", 0)


@dataclass(frozen=True)
class BalanceParams:
    """What one switch's program does (struct balance_params)."""

    choice: int
    per_flowlet: bool
    first_ecmp: bool
    flowlet_gap_ns: int
    enabled: bool = True

    @classmethod
    def of(cls, spec: LoadBalancingSpec, delay_scale: float) -> BalanceParams:
        """A tier's load_balancing as its program's parameters; the flowlet gap is target time,
        the program's wall time: it stretches by the time dilation factor (delay_scale)."""
        gap_ns = round(spec.flowlet_gap_us * 1e3 * delay_scale)
        if spec.mode == "spray":
            order = CHOOSE_ROUND_ROBIN if spec.spray_order == "round_robin" else CHOOSE_RANDOM
            return cls(order, False, False, gap_ns)
        if spec.mode == "flowlet":
            return cls(CHOOSE_RANDOM, True, True, gap_ns)
        if spec.mode == "adaptive":
            return cls(CHOOSE_LEAST_QUEUED, spec.adaptive_granularity == "flowlet", False, gap_ns)
        raise ValueError(f"load_balancing.mode: {spec.mode} is not balanced by the eBPF program")

    def pack(self) -> bytes:
        return PARAMS.pack(
            int(self.enabled),
            self.choice,
            int(self.per_flowlet),
            int(self.first_ecmp),
            self.flowlet_gap_ns,
        )

    @property
    def needs_flowlets(self) -> bool:
        return self.per_flowlet


def hop_capacity(widest: int) -> int:
    """The program variant's next hops per route (its MAX_NEXTHOPS): the widest route's count
    rounded up to a power of two, at least 2."""
    if widest > MAX_NEXTHOPS:
        raise ValueError(f"{widest} next hops: the program holds at most {MAX_NEXTHOPS}")
    return max(2, 1 << (max(widest, 1) - 1).bit_length())


def set_bytes(capacity: int) -> int:
    """The size of struct nexthop_set in a program built for `capacity` next hops."""
    return SET_HEAD.size + capacity * NEXTHOP.size


def drain_q24(rate_bps: float) -> int:
    """A port's rate in bytes per ns with 24 fraction bits, as the marker drains its queue
    (fabrics/ecn/ebpf.py MarkerParams.pack)."""
    return max(round(rate_bps / 8 / 1e9 * (1 << 24)), 1)


@dataclass(frozen=True)
class Candidate:
    """One equal-cost next hop: the egress port, the neighbour's address, the port's queue."""

    ifname: str
    gateway: ipaddress.IPv4Address
    queue_slot: int
    rate_bps: float  # the port's wall rate (target rate x rate scale)

    def pack(self, ifindex: Mapping[str, int]) -> bytes:
        return NEXTHOP.pack(
            ifindex[self.ifname], self.gateway.packed, self.queue_slot, 0, drain_q24(self.rate_bps)
        )


@dataclass(frozen=True)
class NextHopSet:
    """A destination prefix's candidates at one switch (fewer than two: the stack forwards)."""

    prefix: ipaddress.IPv4Network
    route_slot: int
    hops: tuple[Candidate, ...]

    def key(self) -> bytes:
        return route_key(self.prefix)

    def value(self, ifindex: Mapping[str, int], capacity: int) -> bytes:
        """The map value in a program built for `capacity` next hops per route."""
        if len(self.hops) > capacity:
            raise ValueError(
                f"{self.prefix}: {len(self.hops)} next hops, the program holds {capacity}"
            )
        body = b"".join(h.pack(ifindex) for h in self.hops)
        head = SET_HEAD.pack(len(self.hops), self.route_slot)
        return (head + body).ljust(set_bytes(capacity), b"\0")


def route_key(prefix: ipaddress.IPv4Network) -> bytes:
    return ROUTE_KEY.pack(prefix.prefixlen, prefix.network_address.packed)


def route_slots(routes: Iterable[Route]) -> dict[ipaddress.IPv4Network, int]:
    """Each prefix's round-robin counter, in route order (stable across reroutes: fix it from
    the fabric's first routes)."""
    return {r.prefix: i for i, r in enumerate(routes)}


def queue_slots(routes: Iterable[Route]) -> dict[str, int]:
    """Each egress port that is a next hop of some route: its slot in the `queues` map, in the
    order the routes first name them."""
    out: dict[str, int] = {}
    for route in routes:
        for hop in route.nexthops:
            out.setdefault(hop.ifname, len(out))
    return out


def nexthop_sets(
    routes: Sequence[Route],
    route_slot: Mapping[ipaddress.IPv4Network, int],
    queue_slot: Mapping[str, int],
    rate_bps: Mapping[str, float],
    dead: Iterable[str] = (),
    gone: Iterable[ipaddress.IPv4Network] = (),
) -> list[NextHopSet]:
    """One switch's map entries: per route, its next hops but those over `dead` ports; each
    prefix of `gone` (no route left) with none. Prefixes without a slot get the next ones."""
    slots = dict(route_slot)
    skip = set(dead)

    def slot(prefix: ipaddress.IPv4Network) -> int:
        return slots.setdefault(prefix, len(slots))

    out = [
        NextHopSet(
            r.prefix,
            slot(r.prefix),
            tuple(
                Candidate(h.ifname, h.gateway, queue_slot.get(h.ifname, 0), rate_bps[h.ifname])
                for h in r.nexthops
                if h.ifname not in skip
            ),
        )
        for r in routes
    ]
    listed = {r.prefix for r in routes}
    out += [NextHopSet(p, slot(p), ()) for p in gone if p not in listed]
    return out


@dataclass(frozen=True)
class BalanceCounters:
    """What a switch's balancer did since attach (struct balance_counters, summed over CPUs
    and over the switch's ports)."""

    forwarded: int = 0  # packets redirected to the next hop the program chose
    passed: int = 0  # packets left to the kernel's forwarding (or local delivery)
    new_flows: int = 0  # flows first seen (flowlet modes)
    flowlets: int = 0  # flowlets started after an idle gap
    moves: int = 0  # of those, flowlets that took another next hop
    ecmp_misses: int = 0  # first packets whose kernel ECMP choice was not a candidate

    @classmethod
    def unpack_per_cpu(cls, raw: bytes, cpus: int) -> BalanceCounters:
        """A per-CPU array value as bpf(2) returns it: one struct per possible CPU, each
        rounded up to 8 bytes (kernel/bpf/arraymap.c, bpf_percpu_array_copy)."""
        total = [0] * COUNTER_FIELDS
        size = (COUNTERS.size + 7) // 8 * 8
        for cpu in range(cpus):
            for i, v in enumerate(COUNTERS.unpack_from(raw, cpu * size)):
                total[i] += v
        return cls(*total)

    def __add__(self, other: BalanceCounters) -> BalanceCounters:
        return BalanceCounters(
            *(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True))
        )

    def as_tuple(self) -> tuple[int, ...]:
        return (
            self.forwarded,
            self.passed,
            self.new_flows,
            self.flowlets,
            self.moves,
            self.ecmp_misses,
        )


def parse_cpu_list(text: str) -> int:
    """How many CPUs a kernel CPU list names ("0-3", "0,2-5"): the per-CPU maps' value count
    reads /sys/devices/system/cpu/possible (Documentation/admin-guide/cputopology.rst)."""
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count
