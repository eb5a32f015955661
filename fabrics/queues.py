"""Egress queues as data: HTB at the (time-dilated) link rate with a drop-tail leaf on every port.

Mininet's TCLink ignores rates above 1000 Mb/s and hard-codes RED, so tc is configured here
directly (docs/architecture.md, "Pitfalls"). A marker may replace the leaf qdisc (tc RED) or add a clsact
program (eBPF); link delay, when asked, is a netem leaf.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from emulator.transport.packets import ETHERNET_OVERHEAD_BYTES
from fabrics.iproute import Cmd, tc
from fabrics.spec import DEFAULT_PRIORITY_DSCPS
from fabrics.topology import Topology

ETH_HEADER_BYTES = 14
# What a frame takes on the wire beyond skb->len (which holds the Ethernet header): FCS 4,
# preamble and SFD 8, inter-frame gap 12 (IEEE 802.3 clauses 3.2 and 4.4.2). The engine's pacer
# and the simulator charge them; HTB (its `overhead`, psched_l2t_ns in net/sched/sch_generic.c)
# and the eBPF phantom queue are told to, so a switch port drains the frames a real link would.
WIRE_OVERHEAD_BYTES = ETHERNET_OVERHEAD_BYTES - ETH_HEADER_BYTES
ROOT_HANDLE = "1:"
CLASS_ID = "1:1"  # the link: every byte the port sends is charged here
PRIORITY_CLASS_ID = "1:10"  # strict priority (CNPs): served first, never waits behind data
DATA_CLASS_ID = "1:20"  # the data queue: data, ACKs and NAKs, in arrival order
LEAF_HANDLE = "10:"  # the data queue's qdisc (the marker's leaf: RED's counters are read here)
PRIORITY_LEAF_HANDLE = "11:"
# The DSCP field is the top six bits of the IPv4 ToS byte (RFC 2474): u32 matches the byte.
DSCP_TOS_MASK = 0xFC
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
    priority_dscps: tuple[int, ...] = DEFAULT_PRIORITY_DSCPS  # served ahead of the data queue

    @property
    def burst_bytes(self) -> int:
        return max(2 * (self.mtu_bytes + ETH_HEADER_BYTES), int(self.rate_bps / 8 * HTB_BURST_S))


def htb_commands(port: EgressPort, leaf: tuple[str, ...]) -> list[Cmd]:
    """Root HTB with the link class at the port's rate; under it a strict-priority class for the
    port's priority DSCPs (u32 filters on the ToS byte) and the data class holding `leaf` (qdisc
    kind and args), the default for everything else.

    HTB serves a class that has its own rate's tokens (level 0) before one that borrows from its
    parent, and within a level the lower `prio` first (net/sched/sch_htb.c, htb_dequeue). So the
    priority class gets the whole link rate as its own and goes first whenever it holds a frame;
    the data class owns 1% and borrows the rest from the link class, which every frame sent
    (either class's) is charged to: data gets what priority leaves, and the port never passes
    more than its rate, as a strict-priority scheduler on one link."""
    rate_bps = round(port.rate_bps)
    quantum = str(port.mtu_bytes + ETH_HEADER_BYTES)
    burst = f"{port.burst_bytes}b"
    ns, dev = port.netns, port.dev

    def htb_class(classid: str, parent: str, rate: int, ceil: int, prio: int | None) -> Cmd:
        return tc(
            "class",
            "add",
            "dev",
            dev,
            "parent",
            parent,
            "classid",
            classid,
            "htb",
            "rate",
            f"{rate}bit",
            "ceil",
            f"{ceil}bit",
            "burst",
            burst,
            "cburst",
            burst,
            *(("prio", str(prio)) if prio is not None else ()),
            "quantum",
            quantum,
            # Once per skb: exact on switch ports (the fabric never merges forwarded packets);
            # a host's GSO batch is charged it once, where the engine's pacer binds anyway.
            "overhead",
            str(WIRE_OVERHEAD_BYTES),
            netns=ns,
        )

    def leaf_qdisc(parent: str, handle: str, args: tuple[str, ...]) -> Cmd:
        return tc("qdisc", "add", "dev", dev, "parent", parent, "handle", handle, *args, netns=ns)

    default = DATA_CLASS_ID.split(":")[1]
    cmds = [
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
            default,
            netns=ns,
        ),
        htb_class(CLASS_ID, ROOT_HANDLE, rate_bps, rate_bps, None),
        htb_class(PRIORITY_CLASS_ID, CLASS_ID, rate_bps, rate_bps, 0),
        htb_class(DATA_CLASS_ID, CLASS_ID, max(8, rate_bps // 100), rate_bps, 1),
        leaf_qdisc(DATA_CLASS_ID, LEAF_HANDLE, leaf),
        leaf_qdisc(PRIORITY_CLASS_ID, PRIORITY_LEAF_HANDLE, drop_tail(port)),
    ]
    for dscp in port.priority_dscps:
        cmds.append(
            tc(
                "filter",
                "add",
                "dev",
                dev,
                "parent",
                ROOT_HANDLE,
                "protocol",
                "ip",
                "prio",
                "1",
                "u32",
                "match",
                "ip",
                "dsfield",
                f"{dscp << 2:#04x}",
                f"{DSCP_TOS_MASK:#04x}",
                "flowid",
                PRIORITY_CLASS_ID,
                netns=ns,
            )
        )
    return cmds


def drop_tail(port: EgressPort) -> tuple[str, ...]:
    return ("bfifo", "limit", str(port.buffer_bytes))


def netem_delay(port: EgressPort) -> tuple[str, ...]:
    packets = max(1, port.buffer_bytes // (port.mtu_bytes + ETH_HEADER_BYTES))
    return ("netem", "delay", f"{round(port.delay_s * 1e6)}us", "limit", str(packets))


def egress_ports(
    topology: Topology,
    netns: dict[str, str],
    rate_scale: float,
    delay_scale: float,
    nodes: Container[str] | None = None,
) -> tuple[EgressPort, ...]:
    """Every interface's egress queue (of `nodes` only, when given: a fabric part's): host NICs
    shape only; switch ports also mark."""
    out: list[EgressPort] = []
    for (node, dev), link in topology.links.items():
        if nodes is not None and node not in nodes:
            continue
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
                topology.priority_dscps,
            )
        )
    return tuple(out)
