"""Egress queues as data: HTB at the (time-dilated) link rate with a drop-tail leaf on every port.

Mininet's TCLink ignores rates above 1000 Mb/s and hard-codes RED, so tc is configured here
directly (DESIGN.md pitfalls). A marker may replace the leaf qdisc (tc RED) or add a clsact
program (eBPF); link delay, when asked, is a netem leaf.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.transport.packets import ETHERNET_OVERHEAD_BYTES
from fabrics.iproute import Cmd, tc
from fabrics.topology import Topology

ETH_HEADER_BYTES = 14
# What a frame takes on the wire beyond skb->len (which holds the Ethernet header): FCS 4,
# preamble and SFD 8, inter-frame gap 12 (IEEE 802.3 clauses 3.2 and 4.4.2). The engine's pacer
# and the simulator charge them; HTB (its `overhead`, psched_l2t_ns in net/sched/sch_generic.c)
# and the eBPF phantom queue are told to, so a switch port drains the frames a real link would.
WIRE_OVERHEAD_BYTES = ETHERNET_OVERHEAD_BYTES - ETH_HEADER_BYTES
ROOT_HANDLE = "1:"
CLASS_ID = "1:1"
LEAF_HANDLE = "10:"
# HTB needs a burst of at least the bytes the link sends between two timer runs, or it falls
# short of its rate; 100 us of line rate covers the timer slack measured on small VMs.
HTB_BURST_S = 100e-6


@dataclass(frozen=True)
class EcnThresholds:
    kmin_bytes: int
    kmax_bytes: int
    pmax: float


@dataclass(frozen=True)
class EgressPort:
    """One interface's egress queue, with the rate and delay already scaled by the TDF."""

    node: str
    netns: str
    dev: str
    rate_bps: float
    buffer_bytes: int
    mtu_bytes: int
    delay_s: float
    ecn: EcnThresholds | None  # None: host NIC, or marking disabled on this tier
    loss_probability: float = 0.0  # impairment: share of packets dropped at random (eBPF marker)
    xoff_bytes: int = 0  # PFC XOFF: the marker counts time its queue spends above it (0: none)

    @property
    def burst_bytes(self) -> int:
        return max(2 * (self.mtu_bytes + ETH_HEADER_BYTES), int(self.rate_bps / 8 * HTB_BURST_S))


def htb_commands(port: EgressPort, leaf: tuple[str, ...]) -> list[Cmd]:
    """Root HTB, one class at the link rate, and `leaf` (qdisc kind and args) under it."""
    rate = f"{round(port.rate_bps)}bit"
    quantum = str(port.mtu_bytes + ETH_HEADER_BYTES)
    burst = f"{port.burst_bytes}b"
    ns, dev = port.netns, port.dev
    return [
        tc(
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            ROOT_HANDLE,
            "htb",
            "default",
            "1",
            netns=ns,
        ),
        tc(
            "class",
            "add",
            "dev",
            dev,
            "parent",
            ROOT_HANDLE,
            "classid",
            CLASS_ID,
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
            "burst",
            burst,
            "cburst",
            burst,
            "quantum",
            quantum,
            # Once per skb: exact on switch ports (the fabric never merges forwarded packets);
            # a host's GSO batch is charged it once, where the engine's pacer binds anyway.
            "overhead",
            str(WIRE_OVERHEAD_BYTES),
            netns=ns,
        ),
        tc("qdisc", "add", "dev", dev, "parent", CLASS_ID, "handle", LEAF_HANDLE, *leaf, netns=ns),
    ]


def drop_tail(port: EgressPort) -> tuple[str, ...]:
    return ("bfifo", "limit", str(port.buffer_bytes))


def netem_delay(port: EgressPort) -> tuple[str, ...]:
    packets = max(1, port.buffer_bytes // (port.mtu_bytes + ETH_HEADER_BYTES))
    return ("netem", "delay", f"{round(port.delay_s * 1e6)}us", "limit", str(packets))


def egress_ports(
    topology: Topology, netns: dict[str, str], rate_scale: float, delay_scale: float
) -> tuple[EgressPort, ...]:
    """Every interface's egress queue: host NICs shape only; switch ports also mark."""
    out: list[EgressPort] = []
    for (node, dev), link in topology.links.items():
        role = topology.node_by_name[node].role
        delay_s = topology.link_delay_s * delay_scale
        gbps = link.rate_bps / 1e9
        loss = 0.0
        xoff = 0
        if role == "host":
            buffer, ecn = topology.host_buffer_bytes, None
        else:
            tier = topology.tiers[role]
            buffer = tier.buffer_for(gbps)
            kmin, kmax = tier.ecn.thresholds_bytes(gbps)
            ecn = EcnThresholds(kmin, kmax, tier.ecn.pmax) if tier.ecn.enabled else None
            loss = topology.link_loss.get(dev, tier.loss_probability)
            xoff = tier.xoff_bytes
        out.append(
            EgressPort(
                node,
                netns[node],
                dev,
                link.rate_bps * rate_scale,
                buffer,
                topology.mtu_bytes,
                delay_s,
                ecn,
                loss,
                xoff,
            )
        )
    return tuple(out)
