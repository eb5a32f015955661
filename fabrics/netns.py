"""The Clos backend: a Topology made real with named network namespaces, veth pairs and tc.

The nodes and cables are made by `ip` (builder netns: named namespaces, veths created inside
them, never in the root namespace, `ip -batch` per namespace) or through Mininet's Python API
(builder mininet, fabrics/mininet_builder.py: Mininet's nodes and links, their namespaces then
given the fabric's names). Everything after is the same either way: sysctls, addresses, routes,
static neighbours, offloads, HTB and the ECN marker at every egress, each command's exit status
checked (Mininet's TCLink caps rates and hard-codes RED, and reports a missing qdisc with a
printed "*** Error" only: its links are never asked to shape). `emulate fabric up` offers a
Mininet-style CLI (`h0 ping h5`) over these namespaces.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.balance import Balancer, attach_balancers, check_balancing
from fabrics.ecn.markers import NETEM_PROBE, Marker, choose_marker, qdisc_kind_available
from fabrics.iproute import Cmd, in_netns, ip, run, run_batch, run_grouped
from fabrics.mininet_builder import (
    MininetNodes,
    make_cables,
    make_nodes,
    mininet_api,
    refuse_part,
)
from fabrics.ownership import Ledger
from fabrics.queues import EgressPort, egress_ports, htb_commands, netem_delay
from fabrics.topology import HOST_IFNAME, Cable, Route, Topology, routes_without
from fabrics.underlay_guard import (
    FAMILY,
    UnderlayGuard,
    check_guard_tool,
    dropped_cmd,
    dropped_packets,
    underlay_guards,
)
from fabrics.vxlan import FabricPart, check_underlays, make_tunnels, tunnel_devices

NETNS_DIR = Path("/run/netns")  # where `ip netns add` names its namespaces

DEFAULT_PREFIX = "emu-"
ROUTER_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    # L4 hash so UDP source ports spread over the ECMP next hops (ip-sysctl.rst).
    "net/ipv4/fib_multipath_hash_policy": "1",
}
# Linux 6.11+; a fixed seed makes the kernel's ECMP choices those fabrics/ecmp.py predicts.
ECMP_SEED_SYSCTL = "net/ipv4/fib_multipath_hash_seed"
COMMON_SYSCTLS = {
    # Asymmetric ECMP paths must not be dropped by reverse-path filtering.
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
    # No IPv6 router solicitations or DAD in the port counters.
    "net/ipv6/conf/all/disable_ipv6": "1",
    "net/ipv6/conf/default/disable_ipv6": "1",
}

Progress = Callable[[str], None]


@dataclass
class LiveFabric:
    """A fabric that is up: where each node lives, its egress ports, the marker, the ledger."""

    topology: Topology
    netns: dict[str, str]
    ports: tuple[EgressPort, ...]
    marker: Marker
    ledger: Ledger
    rate_scale: float
    delay_scale: float
    timings_s: dict[str, float] = field(default_factory=dict)
    # The nodes this server hosts when the fabric spans several (fabrics/vxlan.py); None: all.
    part: FabricPart | None = None
    # The filters that keep strangers' frames off the part's tunnels (fabrics/underlay_guard.py).
    guards: tuple[UnderlayGuard, ...] = ()
    # Tiers that spray, follow flowlets or adapt instead of ECMP (fabrics/balance/); None: none.
    balancer: Balancer | None = None
    # fabric.builder: mininet: the Mininet nodes whose shells hold the namespaces
    mininet: MininetNodes | None = None

    @property
    def marker_name(self) -> str:
        return self.marker.name

    def netns_of(self, node: str) -> str:
        if node not in self.netns and node in self.topology.node_by_name:
            raise ScenarioError(f"node {node} is on another server (not in this fabric part)")
        return self.netns[node]

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks whose host is on this server (every rank without a part)."""
        return tuple(r for r, h in enumerate(self.topology.hosts) if h in self.netns)

    def host_netns(self) -> tuple[str, ...]:
        """Namespace of each rank, in rank order."""
        return tuple(self.netns_of(h) for h in self.topology.hosts)

    # The engine-facing rank API, shared with fabrics.dut.LiveDut.
    @property
    def ranks(self) -> int:
        return len(self.topology.hosts)

    def rank_netns(self, rank: int) -> str | None:
        return self.netns_of(self.topology.hosts[rank])

    def rank_address(self, rank: int) -> str:
        return str(self.topology.host_address(self.topology.hosts[rank]))

    def rank_rate_bps(self, rank: int) -> float:
        """The rank's NIC rate as emulated (target rate x rate_scale)."""
        return (
            self.topology.links[(self.topology.hosts[rank], HOST_IFNAME)].rate_bps * self.rate_scale
        )

    def check_destination(self, rank: int, dst: str, ifname: str | None = None) -> None:
        """Traffic stays inside the fabric: only other ranks' addresses, only the rank's NIC."""
        hosts = self.topology.hosts
        if not 0 <= rank < len(hosts):
            raise ScenarioError(f"rank {rank}: the fabric has {len(hosts)} ranks")
        if dst not in {self.rank_address(r) for r in range(len(hosts))}:
            raise ScenarioError(f"destination {dst} (rank {rank}) is not a host of this fabric")
        if ifname is not None and ifname != HOST_IFNAME:
            raise ScenarioError(f"interface {ifname} is not rank {rank}'s NIC {HOST_IFNAME}")

    def metadata(self) -> dict[str, Any]:
        part = {"part": {**self.part.metadata(), **self._guard_metadata()}} if self.part else {}
        return {
            "backend": "netns",
            "marker": self.marker.name,
            "rate_scale": self.rate_scale,
            "delay_scale": self.delay_scale,
            "hosts": len(self.topology.hosts),
            "routers": len(self.topology.routers),
            # After an idle spell an HTB class lets its burst through above its rate, at every
            # shaped egress on a flow's path (host, then up and down the switch tiers).
            "shaper_burst_bytes": max((p.burst_bytes for p in self.ports), default=0),
            "shaped_hops_max": 2 * len({n.role for n in self.topology.nodes} - {"host"}),
            "builder": "netns" if self.mininet is None else "mininet",
            # the eBPF phantom queue and tc RED both judge a packet before the port's queue
            "ecn_mark_point": "arrival",
            **({"load_balancing": self.balancer.metadata()} if self.balancer else {}),
            **part,
        }

    def _guard_metadata(self) -> dict[str, Any]:
        """Each underlay filter and the frames it dropped so far (strangers' VXLAN)."""
        return {
            "underlay_guards": [
                {
                    "netns": g.netns,
                    "nft_table": f"{FAMILY} {g.table}",
                    "tunnels": len(g.tunnels),
                    "dropped_frames": dropped_packets(run(dropped_cmd(g), check=False)),
                }
                for g in self.guards
            ]
        }

    def _whole_fabric_only(self, what: str) -> None:
        if self.part is not None:
            raise ScenarioError(
                f"{what}: link events are not supported yet on a fabric split over several servers"
            )

    def set_cable(self, cable: Cable, up: bool) -> None:
        """Take a cable down at both ends (the switches at its ends stop using it at once, as
        their kernels drop next hops over a dead interface), or bring it back up."""
        self._whole_fabric_only(f"cable {cable.a.ifname} {'up' if up else 'down'}")
        state = "up" if up else "down"
        for end in (cable.a, cable.b):
            run_batch([ip("link", "set", "dev", end.ifname, state, netns=self.netns[end.node])])
        if up:  # taking an interface down flushed its neighbours, permanent ones too
            run_grouped(neighbour_commands(self.topology.cables.index(cable), cable, self.netns))
        if self.balancer is not None:  # its next hops follow the kernel's dead ones
            self.balancer.set_cable(cable, up)

    def reroute(self, down: Iterable[Cable]) -> None:
        """Install on every switch the routes of the fabric without `down` (what a converged
        control plane would), replacing what is there; a prefix left without a path is removed."""
        self._whole_fabric_only("reroute")
        routes = routes_without(self.topology, down)
        for node in self.topology.routers:
            ns = self.netns[node]
            now = {r.prefix: r for r in routes.get(node, ())}
            cmds = [ip("route", "replace", *route_args(r), netns=ns) for r in now.values()]
            gone = [
                ip("route", "del", str(r.prefix), netns=ns)
                for r in self.topology.routes.get(node, ())
                if r.prefix not in now
            ]
            run_batch(cmds)
            if gone:  # the kernel may have removed it already with the interface
                run_batch(gone, force=True)
        if self.balancer is not None:
            self.balancer.reroute(routes)

    def close(self) -> list[str]:
        """Release everything this fabric created, in reverse order (Mininet's nodes first
        through Mininet; the ledger kills any shell that survived, by pid)."""
        if self.mininet is not None:
            self.mininet.terminate()
        return self.ledger.release()

    def __enter__(self) -> LiveFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cable_mac(index: int, end: int) -> str:
    """The MAC address of end `end` (0: a, 1: b) of the fabric's cable `index`: locally
    administered unicast (02:...), unique in the fabric and the same in every run, so
    captures and neighbour tables are reproducible."""
    return f"02:00:{index >> 16 & 255:02x}:{index >> 8 & 255:02x}:{index & 255:02x}:{end:02x}"


def neighbour_commands(index: int, cable: Cable, netns: dict[str, str]) -> list[Cmd]:
    """Each end of a cable knows the other's MAC for good (`nud permanent`). With ARP, every
    neighbour entry of a forwarding-only switch goes stale every 15-45 s and is re-probed
    through the port's shaped data queue (ip-sysctl.rst, neigh/default/base_reachable_time_ms);
    a probe stuck behind a congested queue for its 3 x 1 s can fail the entry, and packets
    then wait in the neighbour's queue and leave behind later ones (reordered) or are dropped
    unseen by the port's counters. A static L2 keeps the shaped queues for data alone.
    Only the ends whose node is in `netns` (a fabric part's: the local end of a tunnelled cable)."""
    ends = [e for e in ((cable.a, cable.b, 1), (cable.b, cable.a, 0)) if e[0].node in netns]
    return [
        ip(
            "neigh",
            "replace",
            str(far.address.ip),
            "lladdr",
            cable_mac(index, far_end),
            "dev",
            near.ifname,
            "nud",
            "permanent",
            netns=netns[near.node],
        )
        for near, far, far_end in ends
    ]


def route_args(route: Route) -> list[str]:
    """`ip route add|replace` arguments: the prefix and its next hop(s) (ECMP: several)."""
    if len(route.nexthops) == 1:
        h = route.nexthops[0]
        return [str(route.prefix), "via", str(h.gateway), "dev", h.ifname]
    hops = [str(route.prefix)]
    for h in route.nexthops:
        hops += ["nexthop", "via", str(h.gateway), "dev", h.ifname]
    return hops


def bring_up(
    topology: Topology,
    *,
    rate_scale: float = 1.0,
    delay_scale: float = 1.0,
    marker: str = "auto",
    prefix: str = DEFAULT_PREFIX,
    progress: Progress | None = None,
    part: FabricPart | None = None,
    builder: str = "netns",
) -> LiveFabric:
    """Create the fabric (with `part`: only the nodes this server hosts, its cables to other
    servers as VXLAN tunnels, fabrics/vxlan.py); its nodes and cables by `ip` (builder netns)
    or through Mininet's API (builder mininet, fabrics/mininet_builder.py); on any error (or
    Ctrl-C) release what was made and re-raise."""
    if rate_scale <= 0 or delay_scale <= 0:
        raise ValueError("rate_scale and delay_scale must be positive")
    if builder == "mininet":
        if part is not None:
            refuse_part()
        mininet_api()  # what is missing, before anything is made
    elif builder != "netns":
        raise ScenarioError(f"fabric.builder: {builder!r} is not netns or mininet")
    if part is not None:
        part.check(topology)
        check_underlays(part.tunnels.values(), topology.mtu_bytes)
        check_guard_tool()
    say = progress or (lambda _msg: None)
    ledger = Ledger.claim("clos")
    made = MininetNodes() if builder == "mininet" else None
    try:
        return _bring_up(topology, ledger, rate_scale, delay_scale, marker, prefix, say, part, made)
    except BaseException as exc:
        # Release what was made; if that fails too, the state file keeps the rest for
        # `emulate clean` and the original error is still the one reported.
        try:
            if made is not None:
                made.terminate()
            ledger.release()
        except EnvironmentProblem as release_error:
            exc.add_note(f"releasing the partial fabric also failed: {release_error}")
        raise


def _bring_up(
    topo: Topology,
    ledger: Ledger,
    rate_scale: float,
    delay_scale: float,
    marker_name: str,
    prefix: str,
    say: Progress,
    part: FabricPart | None = None,
    mininet: MininetNodes | None = None,
) -> LiveFabric:
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    local = part.nodes if part is not None else {n.name for n in topo.nodes}
    netns = {n.name: f"{prefix}{n.name}" for n in topo.nodes if n.name in local}

    # Never record (and so later delete) a namespace this fabric did not create.
    taken = sorted(ns for ns in netns.values() if (NETNS_DIR / ns).exists())
    if taken:
        raise EnvironmentProblem(
            f"network namespace {taken[0]} already exists ({len(taken)} of this fabric's names "
            f"are taken): another fabric or a leftover; remove it (`emulate clean` for one of "
            f"ours) or choose another namespace prefix than {prefix!r}"
        )
    # A scratch namespace to find out what this kernel's tc can do before building anything.
    probe = f"{prefix}probe-{os.getpid()}"
    ledger.record([{"kind": "netns", "name": probe}])
    run_batch([ip("netns", "add", probe)])
    marker = choose_marker(marker_name, probe)
    if topo.link_delay_s > 0 and not qdisc_kind_available(NETEM_PROBE, probe):
        raise ScenarioError(
            f"fabric.link_delay_us: {topo.link_delay_s * 1e6:g} us asked, but this kernel has no "
            "netem qdisc (sch_netem) to delay packets; set link_delay_us: 0 (the emulated RTT is "
            "then the software path's), use a kernel with netem, or simulate it (--backend sim)"
        )
    run_batch([ip("netns", "del", probe)])
    ledger.resources.remove({"kind": "netns", "name": probe})
    check_balancing(topo, marker.name)
    switch_ports = {p.ifname for r in topo.routers for p in topo.ports[r]}
    unknown = sorted(set(topo.link_loss) - switch_ports)
    if unknown:
        raise ScenarioError(
            f"fabric.link_loss.{unknown[0]}: no switch port of that name (e.g. "
            f"{sorted(switch_ports)[0]})"
        )
    lossy = sorted(
        f"{role}.loss_probability" for role, tier in topo.tiers.items() if tier.loss_probability > 0
    )
    lossy += [f"link_loss.{port}" for port, share in sorted(topo.link_loss.items()) if share > 0]
    if lossy and marker.name != "ebpf":
        # the loss impairment is the eBPF program's; never silently run without it
        raise ScenarioError(
            f"fabric.{lossy[0]}: random loss needs the eBPF marker program "
            f"(marker: ebpf; this fabric's marker is {marker.name}, and this kernel has no netem)"
        )
    say(f"ECN marker: {marker.name}")

    if mininet is None:
        ledger.record({"kind": "netns", "name": ns} for ns in netns.values())
        run_batch([ip("netns", "add", ns) for ns in netns.values()])
    else:
        make_nodes(topo, local, netns, ledger, mininet)
    for node in (n for n in topo.nodes if n.name in local):
        with in_netns(netns[node.name]):
            sysctls = (
                COMMON_SYSCTLS if node.role == "host" else {**COMMON_SYSCTLS, **ROUTER_SYSCTLS}
            )
            for key, value in sysctls.items():
                _write_sysctl(key, value, netns[node.name])
            if node.role != "host" and topo.ecmp_hash_seed:
                seed = str(topo.router_seed(node.name))
                _write_sysctl(ECMP_SEED_SYSCTL, seed, netns[node.name])
    timings["namespaces_s"] = time.perf_counter() - t0
    say(f"{len(netns)} namespaces")

    mtu = str(topo.mtu_bytes)
    # Cables with both ends here are veth pairs; with one, a tunnel end (fabrics/vxlan.py).
    veths = [(i, c) for i, c in enumerate(topo.cables) if c.a.node in local and c.b.node in local]
    if mininet is not None:
        make_cables(veths, mininet, netns, ledger, topo.mtu_bytes, cable_mac)
    else:
        _make_veths(veths, netns, ledger, mtu)
    guards: list[UnderlayGuard] = []
    if part is not None:
        # The guard first: a tunnel end takes frames from anyone from the moment it exists.
        guards = underlay_guards(part.tunnels.values())
        ledger.record(g.record() for g in guards)
        for guard in guards:
            run(guard.create())
        make_tunnels(tunnel_devices(topo, part, netns, cable_mac), ledger.record)
    config: list[Cmd] = []
    for node in (n for n in topo.nodes if n.name in local):
        ns = netns[node.name]
        config.append(ip("link", "set", "lo", "up", netns=ns))
        for port in topo.ports[node.name]:
            config.append(ip("addr", "add", str(port.address), "dev", port.ifname, netns=ns))
            config.append(ip("link", "set", "dev", port.ifname, "up", netns=ns))
        for route in topo.routes.get(node.name, ()):
            config.append(ip("route", "add", *route_args(route), netns=ns))
    for i, c in enumerate(topo.cables):
        config += neighbour_commands(i, c, netns)
    run_grouped(config)
    # Offloads: segment UDP GSO at the host's transmit so the fabric carries MTU-sized packets.
    # Every veth receives on NAPI: one ring per veth, drained in order. Without it a veth hands
    # each packet to the backlog of whichever CPU transmitted it, and an HTB dequeues on one CPU
    # from its timer and on another from a sender's context, so one flow's packets sit on two
    # CPUs' backlogs and arrive out of order (a RoCE receiver NAKs and the sender goes back N in
    # a fabric that dropped nothing). A veth uses NAPI when its receiver has GRO on and its
    # sender no TSO (drivers/net/veth.c, veth_skb_is_eligible_for_gro). Switch ports still
    # never merge forwarded UDP (rx-udp-gro-forwarding and rx-gro-list off), so the marker and
    # HTB see single packets (docs/architecture.md, "Pitfalls"); a host's GRO only merges for a UDP_GRO socket.
    # A VXLAN tunnel end takes the same flags (all are software features since Linux 5.12). It
    # needs none of them for NAPI: it always receives through the underlay NIC's NAPI and then
    # its own per-CPU gro_cells (vxlan_rcv), so one flow stays on one CPU and in order; its GRO
    # runs there, and forwarded UDP is merged only with the two forwarding flags, off here.
    run_grouped(
        Cmd(
            "ethtool",
            ("-K", dev, "tx-udp-segmentation", "off", "tso", "off", "gro", "on")
            if node in topo.hosts
            else (
                "-K",
                dev,
                "tso",
                "off",
                "gro",
                "on",
                "rx-udp-gro-forwarding",
                "off",
                "rx-gro-list",
                "off",
            ),
            netns[node],
        )
        for (node, dev) in topo.links
        if node in local
    )
    timings["links_s"] = time.perf_counter() - t0 - timings["namespaces_s"]
    tunnels = len(part.tunnels) if part is not None else 0
    vxlan = f" ({tunnels} VXLAN tunnels)" if part is not None else ""
    say(f"{len(veths) + tunnels} links{vxlan}, addresses and routes")

    ports = egress_ports(topo, netns, rate_scale, delay_scale, nodes=local)
    qdiscs: list[Cmd] = []
    records: list[dict[str, Any]] = []
    for egress in ports:
        records.append(
            {"kind": "qdisc", "netns": egress.netns, "dev": egress.dev, "parent": "root"}
        )
        if egress.delay_s > 0 and egress.ecn is not None and marker.name == "red":
            raise ScenarioError(
                "fabric.link_delay_us: link delay cannot be combined with marker: red"
            )
        leaf = netem_delay(egress) if egress.delay_s > 0 else marker.leaf_qdisc(egress)
        qdiscs += htb_commands(egress, leaf)
        extra, extra_res = marker.attach(egress)
        qdiscs += extra
        records += extra_res
    ledger.record(records)
    run_grouped(qdiscs)
    marker.configure(list(ports), record=ledger.record)
    balancer = attach_balancers(topo, netns, ports, marker, ledger, delay_scale)
    if balancer is not None:
        say(f"load balancing at {len(balancer.switches)} switches (eBPF at port ingress)")
    timings["queues_s"] = time.perf_counter() - t0 - timings["namespaces_s"] - timings["links_s"]
    timings["total_s"] = time.perf_counter() - t0
    say(
        f"{len(ports)} egress queues (HTB{', ' + marker.name + ' marker' if marker.name != 'none' else ''})"
    )
    live = LiveFabric(
        topo, netns, ports, marker, ledger, rate_scale, delay_scale, timings, part, tuple(guards)
    )
    live.balancer = balancer
    live.mininet = mininet
    return live


def _make_veths(
    veths: list[tuple[int, Cable]], netns: dict[str, str], ledger: Ledger, mtu: str
) -> None:
    """Each cable with both ends here as a veth pair made inside its namespaces (never in the
    root namespace), recorded before it is made."""
    ledger.record({"kind": "veth", "netns": netns[c.a.node], "name": c.a.ifname} for _, c in veths)
    run_grouped(
        ip(
            "link",
            "add",
            "name",  # explicit: a bare name could parse as an ip-link keyword ("a" is address)
            c.a.ifname,
            "address",
            cable_mac(i, 0),
            "mtu",
            mtu,
            "type",
            "veth",
            "peer",
            "name",
            c.b.ifname,
            "address",
            cable_mac(i, 1),
            "mtu",
            mtu,
            "netns",
            netns[c.b.node],
            netns=netns[c.a.node],
        )
        for i, c in veths
    )


def _write_sysctl(key: str, value: str, netns: str) -> None:
    try:
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)
    except FileNotFoundError:
        if key.startswith("net/ipv6/"):
            return  # IPv6 disabled in this kernel: nothing to quiet
        if key == ECMP_SEED_SYSCTL:
            raise EnvironmentProblem(
                f"this kernel has no {key} (Linux 6.11+); set fabric.ecmp_hash_seed: 0 to let "
                "it pick a random ECMP key (paths are then not predictable)"
            ) from None
        raise EnvironmentProblem(f"sysctl {key} does not exist in {netns}") from None
    except OSError as exc:
        raise EnvironmentProblem(f"setting sysctl {key}={value} in {netns}: {exc}") from None


def check_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("bringing a fabric up needs root (network namespaces, tc, BPF)")
