"""The `fabric:` scenario section: a Clos of Linux routers (`clos`) or real NICs toward a DUT (`dut`).

YAML `fabric: {kind: clos, ...}` picks the class from FABRIC_SPECS by `kind`. Rates and delays are
the TARGET fabric's; the backend divides rates and multiplies delays by the run's time dilation
factor. Queue sizes and ECN thresholds are bytes and are not scaled (docs/architecture.md, "Time dilation").
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from typing import Literal

from emulator.config import param
from emulator.errors import ScenarioError
from emulator.transport.params import HPCC_ECN_THRESHOLDS

HPCC_SOURCE = (
    "HPCC simulator configs (alibaba-edu/High-Precision-Congestion-Control, mix/config.txt "
    "KMIN_MAP/KMAX_MAP/PMAX_MAP): 100/400 KB at 25G, 400/1600 KB at 100G, 800/3200 KB at 400G, "
    "Pmax 0.2"
)

MarkerName = Literal["auto", "red", "ebpf", "none"]


def hpcc_thresholds_bytes(link_gbps: float) -> tuple[int, int]:
    """Kmin/Kmax for a link speed: the HPCC row whose speed is nearest on a log scale.

    The table is the transport's (one copy of the production thresholds for the whole project).
    """
    speed_bps = min(HPCC_ECN_THRESHOLDS, key=lambda bps: abs(math.log(bps / (link_gbps * 1e9))))
    kmin, kmax, _ = HPCC_ECN_THRESHOLDS[speed_bps]
    return kmin, kmax


# DSCPs a port serves in strict priority: CNPs. NVIDIA's RoCE default sends CNPs with DSCP 48
# (cnp_dscp), which a trusting switch maps to switch priority 6, and its default RoCE
# configuration puts traffic class 6 (CNP) in strict priority ahead of the RoCE class 3 (Cumulus
# Linux user guide, "RDMA over Converged Ethernet - RoCE", Default RoCE Mode Configuration, Port
# ETS), so congestion feedback never waits behind the data it reports on. ACKs and NAKs keep
# their QP's traffic class and queue with the data.
DEFAULT_PRIORITY_DSCPS = (48,)


@dataclass(frozen=True)
class EcnSpec:
    """DCQCN switch marking (CP): 0 below Kmin, linear to Pmax at Kmax, 1 above Kmax."""

    kmin_bytes: int | None = param(
        None,
        doc="queue length where marking starts; default: HPCC threshold for the port's speed",
        unit="bytes",
        source=HPCC_SOURCE,
        min=0,
    )
    kmax_bytes: int | None = param(
        None,
        doc="queue length where marking reaches Pmax; default: HPCC threshold for the port's speed",
        unit="bytes",
        source=HPCC_SOURCE,
        min=1,
    )
    pmax: float = param(0.2, doc="marking probability at Kmax", source=HPCC_SOURCE, min=0, max=1)
    enabled: bool = param(True, doc="mark at all on this tier")

    def __post_init__(self) -> None:
        if (
            self.kmin_bytes is not None
            and self.kmax_bytes is not None
            and self.kmin_bytes >= self.kmax_bytes
        ):
            raise ValueError(
                f"kmin_bytes: {self.kmin_bytes} must be below kmax_bytes {self.kmax_bytes}"
            )

    def thresholds_bytes(self, link_gbps: float) -> tuple[int, int]:
        """(Kmin, Kmax) for a port of this speed, filling defaults from the HPCC table."""
        kmin, kmax = hpcc_thresholds_bytes(link_gbps)
        kmin = self.kmin_bytes if self.kmin_bytes is not None else kmin
        kmax = self.kmax_bytes if self.kmax_bytes is not None else kmax
        if kmin >= kmax:
            # Only one of the two was given and it crosses the default of the other.
            raise ValueError(f"kmin_bytes: {kmin} must be below kmax_bytes {kmax}")
        return kmin, kmax


@dataclass(frozen=True)
class LinkEventSpec:
    """Impairment: a cable taken down (both ends) during the replay, and maybe brought back."""

    port: str = param(
        doc="an interface at either end of the cable, as the fabric names it (l0-s1, s1-l0, "
        "l0-h3; with parallel_links: l0-s1-2)",
    )
    down_at_us: float = param(doc="when it goes down, after the replay starts", unit="us", min=0.0)
    up_at_us: float | None = param(
        None, doc="when it comes back up (default: stays down)", unit="us", min=0.0
    )
    reroute_after_us: float = param(
        0.0,
        doc="how long the other switches keep sending toward the dead cable before their routes "
        "avoid it (the control plane's convergence); the switch at each end reroutes at once",
        unit="us",
        min=0.0,
    )

    def __post_init__(self) -> None:
        if self.up_at_us is not None and self.up_at_us <= self.down_at_us:
            raise ValueError(
                f"up_at_us: {self.up_at_us:g} must be after down_at_us {self.down_at_us:g}"
            )


# A switch's shared packet buffer: Broadcom Tomahawk 3 (BCM56980), the 12.8 Tb/s 32 x 400G
# ASIC of the 400G Clos the study emulates, has 64 MB of on-chip buffer shared by all its ports
# (Broadcom's product brief).
SHARED_BUFFER_BYTES = 64 * 1024 * 1024
# Dynamic thresholds (Choudhury and Hahne, "Dynamic queue length thresholds for shared-memory
# packet switches", IEEE/ACM ToN 1998): a queue may grow to alpha x the free shared buffer, so one
# congested queue settles at B alpha / (1 + alpha); alpha 1 (2^0) gives it half the buffer.
EGRESS_DT_ALPHA = 1.0
# PFC XOFF as the HPCC ns-3 model sets it (alibaba-edu/High-Precision-Congestion-Control,
# switch-mmu.cc GetPfcThreshold: (buffer - headroom - reserve - shared used) >> pfc_a_shift, with
# pfc_a_shift 3 in its third.cc): one congested ingress queue pauses at T = (B - T) / 8, T = B / 9.
PFC_A_SHIFT = 3
# Bytes a maximum frame takes on the wire beyond its IP MTU: Ethernet header and FCS, preamble and
# inter-frame gap (IEEE 802.3); a PFC frame is a minimum frame, 64 bytes plus the same 20.
ETHERNET_FRAMING_BYTES = 14 + 4 + 8 + 12
PFC_FRAME_BYTES = 64 + 8 + 12


def dynamic_threshold_bytes(shared_bytes: int, alpha: float) -> int:
    """Where one congested queue settles under dynamic thresholds: q = alpha (B - q)."""
    return int(shared_bytes * alpha / (1.0 + alpha))


LoadBalancing = Literal["ecmp", "spray", "flowlet", "adaptive"]
# Published flowlet gaps: CONGA 500 us (Alizadeh et al., SIGCOMM 2014, section 5); LetFlow
# 150-500 us in its 10-40G testbed (Vanini et al., NSDI 2017, section 5). A 400G fabric's
# round trips are a few microseconds, so a shorter gap still exceeds the path-delay difference
# that would reorder a moving flowlet.
DEFAULT_FLOWLET_GAP_US = 100.0


@dataclass(frozen=True)
class LoadBalancingSpec:
    """How a switch of this tier chooses among the equal-cost next hops toward a destination."""

    mode: LoadBalancing = param(
        "ecmp",
        doc="ecmp: the 5-tuple hash picks one next hop per flow (a queue pair keeps one path); "
        "spray: each packet to one of the equal-cost next hops (spray_order); flowlet: a flow "
        "moves to another next hop (chosen at random) only after an idle gap longer than "
        "flowlet_gap_us, so a burst never reorders; adaptive: the equal-cost next hop whose "
        "egress queue holds the fewest bytes, per packet or per flowlet (adaptive_granularity)",
        source="Alizadeh et al., CONGA, SIGCOMM 2014 (flowlets); Dixit et al., packet spraying, "
        "INFOCOM 2013; sonic-mgmt docs/testplan/ARS-test-plan.md (adaptive routing); "
        "draft-calabria-bmwg-ai-fabric-training-bench (flowlet and spray procedures)",
    )
    spray_order: Literal["random", "round_robin"] = param(
        "random",
        doc="spray: each packet's next hop drawn uniformly at random, or the next in turn per "
        "switch and destination",
    )
    flowlet_gap_us: float = param(
        DEFAULT_FLOWLET_GAP_US,
        doc="flowlet (and adaptive per flowlet): the idle gap, in target time, after which a "
        "flow's next packet may take another next hop",
        unit="us",
        source="CONGA (SIGCOMM 2014): 500 us; LetFlow (NSDI 2017): 150-500 us at 10-40G",
        min=0.0,
        min_exclusive=True,
    )
    adaptive_granularity: Literal["packet", "flowlet"] = param(
        "packet",
        doc="adaptive: choose the least-queued next hop for every packet, or at each flowlet",
    )


@dataclass(frozen=True)
class TierSpec:
    """Per switch tier (leaf, spine, super spine): egress buffer, PFC threshold, ECN marking."""

    shared_buffer_bytes: int = param(
        SHARED_BUFFER_BYTES,
        doc="the switch's shared packet buffer, from which a congested port's buffer and PFC XOFF "
        "threshold are derived",
        unit="bytes",
        source="Broadcom Tomahawk 3 (BCM56980, 12.8 Tb/s): 64 MB shared on-chip buffer",
        min=1500,
    )
    buffer_bytes: int | None = param(
        None,
        doc="egress queue limit per port (drop tail); default: what dynamic thresholds (alpha 1) "
        "give one congested port of the shared buffer, half of it",
        unit="bytes",
        source="Choudhury and Hahne, dynamic queue length thresholds (IEEE/ACM ToN 1998)",
        min=1500,
    )
    pfc_xoff_bytes: int | None = param(
        None,
        doc="PFC XOFF: data bytes an ingress port may hold before the switch pauses its upstream. "
        "The simulator (backend sim) pauses; its default is the HPCC ns-3 dynamic threshold, "
        "(shared buffer - headroom - bytes held) >> 3, so one congested ingress pauses at about "
        "shared buffer / 9 and many pause earlier. The emulated fabric cannot pause: it reports "
        "the time its egress queue spent at or above this (default shared buffer / 9) as "
        "PFC-equivalent pause time (ports.parquet pause_s, summary.json pfc_equivalent)",
        unit="bytes",
        source="HPCC ns-3 switch-mmu.cc GetPfcThreshold, pfc_a_shift 3",
        min=0,
    )
    pfc_xon_offset_bytes: int = param(
        3072,
        doc="simulator: a paused ingress resumes (XON) once its bytes are this far below XOFF "
        "and its headroom is empty",
        unit="bytes",
        source="HPCC ns-3 switch-mmu.cc: resume_offset 3 KiB, CheckShouldResume",
        min=0,
    )
    pfc_headroom_bytes: int | None = param(
        None,
        doc="simulator: bytes an ingress may take above XOFF while its PAUSE travels upstream; "
        "beyond it the packet is dropped (a lossless class never drops when it is large enough). "
        "Default per link: twice the link's bandwidth-delay product (rate x link_delay_us) plus "
        "two maximum frames and the PFC frame itself",
        unit="bytes",
        source="IEEE 802.1Qbb annex O (what is in flight while a PAUSE takes effect: the round "
        "trip of the link and a maximum frame in transmission at each end); the HPCC ns-3 "
        "third.cc (alibaba-edu) sizes it 3 x the one-way bandwidth-delay product, its forks "
        "2 x that plus 2 packets, the form used here",
        min=0,
    )
    ecn: EcnSpec = field(default_factory=EcnSpec)
    loss_probability: float = param(
        0.0,
        doc="impairment: share of IPv4 packets every egress port of this tier drops at random "
        "(needs the eBPF marker: this kernel has no netem); flows still complete through "
        "go-back-N, and the fidelity verdict does not count these drops against a lossless "
        "fabric",
        min=0.0,
        max=0.5,
    )
    load_balancing: LoadBalancingSpec = param(
        doc="how this tier's switches spread packets over equal-cost next hops (ecmp, spray, "
        "flowlet, adaptive)",
        default_factory=LoadBalancingSpec,
    )

    def buffer_for(self, link_gbps: float) -> int:
        del link_gbps  # a shared buffer's share does not depend on the port's speed
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        return dynamic_threshold_bytes(self.shared_buffer_bytes, EGRESS_DT_ALPHA)

    def headroom_for(self, rate_bps: float, delay_s: float, mtu_bytes: int) -> int:
        """PFC headroom of an ingress fed by a link of this rate and delay (see the key)."""
        if self.pfc_headroom_bytes is not None:
            return self.pfc_headroom_bytes
        max_frame = mtu_bytes + ETHERNET_FRAMING_BYTES
        return int(2 * rate_bps * delay_s / 8) + 2 * max_frame + PFC_FRAME_BYTES

    @property
    def xoff_bytes(self) -> int:
        if self.pfc_xoff_bytes is not None:
            return self.pfc_xoff_bytes
        return dynamic_threshold_bytes(self.shared_buffer_bytes, 1.0 / (1 << PFC_A_SHIFT))


@dataclass(frozen=True)
class ClosSpec:
    """A two-tier leaf/spine Clos (or three tiers: pods joined by super spines) of Linux routers."""

    hosts_per_leaf: int = param(4, doc="hosts (ranks) under each leaf", min=1, max=127)
    leaves: int = param(4, doc="leaves per pod", min=1, max=1024)
    spines: int = param(
        2, doc="spines per pod, each linked to every leaf of its pod", min=1, max=256
    )
    pods: int = param(1, doc="pods; more than one needs super_spines (third tier)", min=1, max=256)
    super_spines: int = param(
        0, doc="third-tier switches, each linked to every spine of every pod", min=0, max=256
    )
    host_link_gbps: float = param(
        400.0,
        doc="host NIC link rate of the target fabric",
        unit="Gb/s",
        source="Chakra paper section 5.3: 400G Clos",
        min=0.0,
        min_exclusive=True,
    )
    fabric_link_gbps: float = param(
        400.0,
        doc="leaf-spine (and spine-super spine) link rate of the target fabric",
        unit="Gb/s",
        min=0.0,
        min_exclusive=True,
    )
    oversubscription: float | None = param(
        None,
        doc="leaf downlink/uplink capacity ratio; derived when omitted, checked when given",
        min=0.0,
        min_exclusive=True,
    )
    parallel_links: int = param(1, doc="links between each connected switch pair", min=1, max=16)
    mtu_bytes: int = param(
        9000,
        doc="interface MTU; a 4096-byte RoCE path MTU needs more than 1500",
        unit="bytes",
        source="docs/architecture.md, RoCEv2 on the wire: path MTU 4096 needs the fabric's interface MTU raised (use 9000)",
        min=576,
        max=9000,
    )
    host_buffer_bytes: int = param(
        4_194_304, doc="host NIC egress queue limit (drop tail)", unit="bytes", min=1500
    )
    link_delay_us: float = param(
        0.0,
        doc="one-way propagation delay per link (the emulated fabric needs netem in the kernel; "
        "this one has none, so only the simulator takes a non-zero value here)",
        unit="us",
        min=0.0,
    )
    switch_latency_ns: float = param(
        0.0,
        doc="simulator only: processing latency of every switch hop, from a packet's arrival to "
        "its egress queue (a Tomahawk-class switch forwards in several hundred ns); the "
        "emulated fabric refuses a non-zero value (its hops take what this machine takes)",
        unit="ns",
        min=0.0,
    )
    pfc: bool = param(
        True,
        doc="PFC (IEEE 802.1Qbb) on the RoCE data priority: the simulator pauses upstream ports "
        "at XOFF and resumes at XON (per tier: pfc_xoff_bytes, pfc_xon_offset_bytes, "
        "pfc_headroom_bytes), so the class never drops; off, its egress queues tail-drop at "
        "buffer_bytes. The emulated fabric cannot pause either way: it reports PFC-equivalent "
        "pause time instead",
    )
    ecn_mark_point: Literal["auto", "arrival", "departure"] = param(
        "auto",
        doc="when a switch port applies the ECN marking law: arrival judges the queue a packet "
        "finds (DCTCP's switch rule, RED's, and the emulated fabric's eBPF phantom queue and tc "
        "RED, which run before the port's queue); departure judges the queue it leaves behind "
        "as it is sent (the HPCC ns-3 switch), so the mark skips the queueing delay it reports "
        "and DCQCN hears of congestion sooner (fewer marks, shallower queues). Only the "
        "simulator can mark at departure. auto: arrival on the emulated fabric, departure in "
        "simulation, except for `emulate run --reference sim`, whose simulation marks on "
        "arrival like the emulated run it is the reference for",
        source="Alizadeh et al., DCTCP, SIGCOMM 2010, section 3.1 (mark on arrival); HPCC ns-3 "
        "switch-node.cc SwitchNotifyDequeue (mark on dequeue)",
    )
    priority_dscps: tuple[int, ...] = param(
        DEFAULT_PRIORITY_DSCPS,
        doc="DSCPs every port (switch and host NIC) serves in strict priority ahead of its data "
        "queue: CNPs by default, so congestion feedback never waits behind the data it reports "
        "on. Everything else (data, and ACKs and NAKs, which keep their QP's class) shares the "
        "data queue in arrival order, which is the one that marks, fills and (in simulation) "
        "pauses. Match transport.cnp_dscp; [] puts CNPs in the data queue",
        source="Cumulus Linux user guide, RDMA over Converged Ethernet - RoCE: traffic class 6 "
        "(CNP) strict in the default RoCE configuration",
    )
    ecmp_hash_seed: int = param(
        1,
        doc="the fabric's ECMP hash seed (net.ipv4.fib_multipath_hash_seed): fixed, it makes "
        "ECMP paths repeatable and predictable (fabrics/ecmp.py); 0 lets each router's kernel "
        "pick a random one",
        min=0,
        max=0xFFFFFFFF,
    )
    ecmp_seed_per_router: bool = param(
        True,
        doc="each router hashes with its own seed, drawn from ecmp_hash_seed and its name; "
        "false: every router with ecmp_hash_seed itself, so a spine repeats its leaf's choice "
        "and half of the spine-to-leaf links of a 2-spine, 4-parallel-link Clos stay idle (hash "
        "polarization)",
        source="Cisco IOS CEF load sharing, `ip cef load-sharing algorithm universal <id>`: a "
        "unique ID per router against CEF polarization",
    )
    builder: Literal["netns", "mininet"] = param(
        "netns",
        doc="what makes the nodes and cables: netns (named namespaces and veth pairs by `ip`) or "
        "mininet (Mininet's Python API: a Mininet Node per host and switch, Linux routers as in "
        "Mininet's linuxrouter example, a Mininet Link per cable; Debian's mininet package). "
        "Everything on them (addresses, routes, HTB, the ECN marker, the engine, counters, "
        "teardown) is the same; one machine only (docs/mininet.md)",
    )
    marker: MarkerName = param(
        "auto",
        doc="switch ECN marker: ebpf (phantom queue: DCQCN's law on the instantaneous queue, "
        "independent draws, the law of emulator/transport/marking.py); red (tc RED with ecn and nodrop, an explicit "
        "choice: it judges an EWMA-averaged queue and spaces marks by packet count, about twice "
        "the linear probability at the same queue); none; auto: ebpf",
    )
    leaf: TierSpec = field(default_factory=TierSpec)
    spine: TierSpec = field(default_factory=TierSpec)
    super_spine: TierSpec = field(default_factory=TierSpec)
    link_loss: dict[str, float] = param(
        default_factory=dict,
        doc="impairment: switch egress port -> share of its IPv4 packets dropped at random (l0-s1: "
        "0.01), over the tier's loss_probability; needs the eBPF marker like it",
    )
    link_events: tuple[LinkEventSpec, ...] = param(
        (),
        doc="impairment: cables going down and up during the replay, in target time; the "
        "routes avoid a dead cable where another path exists",
    )

    @property
    def tiers(self) -> dict[str, TierSpec]:
        """Switch tier name (a node role) -> its settings."""
        return {"leaf": self.leaf, "spine": self.spine, "super_spine": self.super_spine}

    def loss_impairment(self) -> dict[str, float]:
        """Where random loss is set: tier name or switch port -> probability."""
        out = {name: t.loss_probability for name, t in self.tiers.items() if t.loss_probability}
        out.update({port: share for port, share in self.link_loss.items() if share > 0})
        return out

    def __post_init__(self) -> None:
        for dscp in self.priority_dscps:
            if not 0 <= dscp <= 63:
                raise ValueError(f"priority_dscps: {dscp} is not a DSCP (0..63)")
        for port, share in self.link_loss.items():
            if not 0.0 <= share <= 0.5:
                raise ValueError(f"link_loss: {port}: {share:g} must be between 0 and 0.5")
        if self.pods > 1 and self.super_spines == 0:
            raise ValueError(f"super_spines: {self.pods} pods need at least one super spine")
        if self.pods == 1 and self.super_spines > 0:
            raise ValueError("super_spines: a third tier needs pods > 1")
        for name, tier in self.tiers.items():
            mode = tier.load_balancing.mode
            if mode != "ecmp" and self.equal_cost_next_hops(name) < 2:
                raise ValueError(
                    f"{name}.load_balancing.mode: {mode} needs a choice of next hops, and a "
                    f"{name} of this fabric has one toward every destination"
                )
        if self.oversubscription is not None:
            derived = self.derived_oversubscription
            if not math.isclose(self.oversubscription, derived, rel_tol=0.01):
                raise ValueError(
                    f"oversubscription: {self.oversubscription:g} does not match the topology "
                    f"({self.hosts_per_leaf} x {self.host_link_gbps:g} Gb/s down, "
                    f"{self.spines * self.parallel_links} x {self.fabric_link_gbps:g} Gb/s up "
                    f"= {derived:g})"
                )

    @property
    def host_count(self) -> int:
        return self.hosts_per_leaf * self.leaves * self.pods

    def equal_cost_next_hops(self, tier: str) -> int:
        """The most equal-cost next hops a switch of `tier` has toward any destination (0: the
        fabric has no such tier): a leaf goes up over every link to every spine; a spine up
        over every link to every super spine (pods > 1) or down its parallel links to a leaf;
        a super spine down to any spine of the destination's pod."""
        links = self.parallel_links
        if tier == "leaf":
            return self.spines * links if self.leaves * self.pods > 1 else 0
        if tier == "spine":
            return self.super_spines * links if self.pods > 1 else links
        if tier == "super_spine":
            return self.spines * links if self.pods > 1 else 0
        raise ValueError(f"unknown switch tier {tier!r}")

    # The facts a run asks of any fabric (DutSpec has the same): its ranks, a rank's NIC rate,
    # its switch ports' rate (None: not ours to measure) and its slowest link (target b/s).
    @property
    def ranks(self) -> int:
        return self.host_count

    @property
    def rank_rate_bps(self) -> float:
        return self.host_link_gbps * 1e9

    @property
    def port_rate_bps(self) -> float:
        return self.fabric_link_gbps * 1e9

    @property
    def slowest_link_bps(self) -> float:
        return min(self.host_link_gbps, self.fabric_link_gbps) * 1e9

    @property
    def derived_oversubscription(self) -> float:
        down = self.hosts_per_leaf * self.host_link_gbps
        up = self.spines * self.parallel_links * self.fabric_link_gbps
        return down / up


@dataclass(frozen=True)
class DutSpec:
    """Ranks on existing interfaces cabled to a device under test that switches and marks ECN."""

    interfaces: tuple[str, ...] = param(
        (),
        doc="existing interface per rank (physical port, VLAN or macvlan), rank order; with "
        "ranks_per_interface, one per port",
    )
    addresses: tuple[str, ...] = param(
        (),
        doc="IPv4 address/prefix per rank, rank order; with ranks_per_interface, the first "
        "rank's of each port (the port's next ranks take the next addresses)",
    )
    gateways: tuple[str, ...] = param(
        (),
        doc="next hop per rank (with ranks_per_interface: per port) toward the DUT (empty: all "
        "ranks on one subnet)",
    )
    ranks_per_interface: int = param(
        1,
        doc="endpoints behind each interface: ranks 0..n-1 on the first, n..2n-1 on the next, "
        "each its own address and QPs, sharing the port's line rate (a tester's many "
        "endpoints per port)",
        min=1,
        max=65536,
    )
    routes: tuple[str, ...] = param(
        (), doc="prefixes each rank reaches through its gateway, e.g. 10.0.0.0/8"
    )
    namespaces: bool = param(True, doc="move each rank's interface into its own network namespace")
    allowlist: tuple[str, ...] = param(
        (), doc="REQUIRED: prefixes traffic may go to; anything else is refused before sending"
    )
    max_rate_gbps: float = param(
        10.0, doc="cap on any rank's sending rate", unit="Gb/s", min=0.0, min_exclusive=True
    )
    mtu_bytes: int | None = param(
        None, doc="MTU to set on the rank interfaces; default: leave as is", unit="bytes", min=576
    )

    def __post_init__(self) -> None:
        if not self.allowlist:
            raise ValueError(
                "allowlist: a dut fabric needs an allowlist of destination prefixes "
                "(traffic to anything else is refused)"
            )
        if not self.interfaces:
            raise ValueError("interfaces: give one existing interface per rank")
        if len(self.addresses) != len(self.interfaces):
            raise ValueError(
                f"addresses: {len(self.addresses)} given for {len(self.interfaces)} interfaces"
            )
        if self.gateways and len(self.gateways) != len(self.interfaces):
            raise ValueError(
                f"gateways: {len(self.gateways)} given for {len(self.interfaces)} interfaces"
            )
        if len(set(self.interfaces)) != len(self.interfaces) and self.namespaces:
            raise ValueError("interfaces: an interface can carry one rank when namespaces is on")
        for key, values in (("allowlist", self.allowlist), ("routes", self.routes)):
            for value in values:
                _check(key, value, lambda v: ipaddress.ip_network(v, strict=False))
        for value in self.addresses:
            _check("addresses", value, ipaddress.ip_interface)
        for value in self.gateways:
            _check("gateways", value, ipaddress.ip_address)
        for name in self.interfaces:
            if not 0 < len(name) <= 15 or "/" in name or " " in name:
                raise ValueError(f"interfaces: {name!r} is not a Linux interface name")
        if self.ranks_per_interface > 1:
            if not self.namespaces:
                raise ValueError(
                    "ranks_per_interface: endpoints sharing a port need the port in its own "
                    "namespace (namespaces: true)"
                )
            for cidr in self.addresses:
                first = ipaddress.IPv4Interface(cidr)
                last = first.ip + (self.ranks_per_interface - 1)
                net = first.network
                if last not in net or (net.prefixlen < 31 and last == net.broadcast_address):
                    raise ValueError(
                        f"addresses: {cidr} leaves no room for {self.ranks_per_interface} "
                        f"ranks (the last would be {last}, outside {net}'s hosts)"
                    )

    # Per-rank views: with ranks_per_interface n, rank r is endpoint r mod n of port r // n.
    @property
    def rank_count(self) -> int:
        return len(self.interfaces) * self.ranks_per_interface

    # The facts a run asks of any fabric (as ClosSpec's): the switch under test's ports are not
    # ours (no port rate, no slowest link: they run unshaped at the device's rates).
    @property
    def ranks(self) -> int:
        return self.rank_count

    @property
    def rank_rate_bps(self) -> float:
        return self.max_rate_gbps * 1e9

    @property
    def port_rate_bps(self) -> float | None:
        return None

    @property
    def slowest_link_bps(self) -> float | None:
        return None

    def port_of(self, rank: int) -> int:
        return rank // self.ranks_per_interface

    def rank_interface(self, rank: int) -> str:
        return self.interfaces[self.port_of(rank)]

    def rank_cidr(self, rank: int) -> str:
        port = ipaddress.IPv4Interface(self.addresses[self.port_of(rank)])
        ip = port.ip + rank % self.ranks_per_interface
        return f"{ip}/{port.network.prefixlen}"

    def rank_gateway(self, rank: int) -> str | None:
        return self.gateways[self.port_of(rank)] if self.gateways else None


@dataclass(frozen=True)
class MininetSpec:
    """Ranks on the hosts of a Mininet network a user built and started, run from their script
    through emulator.mininet.run_on_mininet (docs/mininet.md): the network switches and marks;
    its Linux-node switches can be read and given the project's ECN marker."""

    hosts: tuple[str, ...] = param(
        (), doc="REQUIRED: the Mininet host (by name) of each rank, rank order"
    )
    host_link_gbps: float = param(
        100.0,
        doc="the ranks' NIC rate in the target's time: the engine paces each rank at it divided "
        "by run.time_dilation, which the hosts' links must carry (a TCLink's bw is checked)",
        unit="Gb/s",
        min=0.0,
        min_exclusive=True,
    )
    fabric_link_gbps: float | None = param(
        None,
        doc="the switch ports' rate in the target's time (their utilization, the marker's "
        "drain rate where a link has no bw of its own); default host_link_gbps",
        unit="Gb/s",
        min=0.0,
        min_exclusive=True,
    )
    switches: tuple[str, ...] = param(
        (),
        doc="the network's switches (Linux nodes, each in its own namespace) whose ports are "
        "read and marked; empty: every node not a rank's host that has a namespace of its own. "
        "Open vSwitch and root-namespace bridges are left alone (the summary says which)",
    )
    marker: Literal["ebpf", "none"] = param(
        "ebpf",
        doc="ebpf: the project's phantom-queue ECN marker at the egress of every read switch "
        "port (tc clsact, beside whatever qdisc the port has), DCQCN's law with switch.ecn; "
        "none: the network marks (or not) on its own",
    )
    switch: TierSpec = field(default_factory=TierSpec)

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError("hosts: name the Mininet host of each rank, in rank order")
        if len(set(self.hosts)) != len(self.hosts):
            raise ValueError("hosts: a Mininet host can carry one rank")
        overlap = sorted(set(self.hosts) & set(self.switches))
        if overlap:
            raise ValueError(f"switches: {overlap[0]} is also a rank's host")

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    @property
    def rank_rate_bps(self) -> float:
        return self.host_link_gbps * 1e9

    @property
    def port_rate_bps(self) -> float:
        return (self.fabric_link_gbps or self.host_link_gbps) * 1e9

    @property
    def slowest_link_bps(self) -> float | None:
        return None  # the user's links are theirs: not known here


def _check(key: str, value: str, parse: object) -> None:
    try:
        parse(value)  # type: ignore[operator]
    except ValueError as exc:
        raise ValueError(f"{key}: {value!r} is not valid ({exc})") from None


FABRIC_SPECS: dict[str, type] = {"clos": ClosSpec, "dut": DutSpec, "mininet": MininetSpec}


def kind_of(spec: object) -> str:
    """The `fabric.kind` a spec was read from."""
    for kind, cls in FABRIC_SPECS.items():
        if isinstance(spec, cls):
            return kind
    raise ScenarioError(f"fabric: {type(spec).__name__} is not a known fabric kind")
