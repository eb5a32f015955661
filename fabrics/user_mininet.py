"""A Mininet network a user built and started, as the fabric of a run (fabric kind mininet).

The network is theirs: its nodes, links, addresses and routes stay as they are, and the run
takes only what it needs, each item recorded in the state file and given back at the end:
- a name for each rank host's namespace and each read switch's (`ip netns attach`; deleting
  the name leaves the namespace to the Mininet node's shell), so the engine's sockets, the
  counters and `emulate clean` find them as they find the emulated Clos's;
- offloads on each rank's interface and each read switch port (turned back as they were): UDP
  and TCP segmentation off and GRO on, so a GSO send leaves as MTU-sized packets, as from a NIC,
  and each veth receives in order (HOST_OFFLOADS below says why);
- with marker ebpf, the project's phantom-queue ECN marker at the egress of each read switch
  port (a clsact qdisc and a BPF filter beside whatever qdisc the port has).

Ranks are Mininet hosts named in `fabric.hosts`; a rank's address is its host's IP, its NIC the
host's default interface. Switches are read where they are Linux nodes in namespaces of their own
(Mininet's LinuxRouter, a Node with ip_forward): their ports' bytes, packets and drops, and the
marker's marks and queue. Open vSwitch and bridges in the root namespace are not read (the
metadata says which, and why). A link with its own rate (a TCLink's bw) must agree with the
scenario's rate at the run's time dilation; one without is unshaped, which the run says.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.ecn.markers import EbpfMarker, Marker, NoMarker
from fabrics.iproute import Cmd, ip, run, run_batch, run_grouped, tc
from fabrics.netns import NETNS_DIR
from fabrics.ownership import Ledger
from fabrics.qdisc_stats import QdiscStats
from fabrics.queues import EcnThresholds, EgressPort
from fabrics.spec import MininetSpec

DEFAULT_PREFIX = "mn-"
RATE_TOLERANCE = 0.01  # a link's bw and the scenario's rate at the TDF agree within 1%
# (feature as `ethtool -k` shows it, as `ethtool -K` takes it, what the run sets): a rank's GSO
# send leaves as MTU-sized packets, as from a NIC (switches queue and mark single packets), and
# every veth the run touches receives through NAPI, in order: a veth does when its receiver has
# GRO on and its sender no TSO (drivers/net/veth.c, veth_skb_is_eligible_for_gro); otherwise it
# hands each packet to the backlog of the CPU that sent it, and a flow sent from two CPUs
# arrives out of order (fabrics/netns.py sets the same on its own fabric)
HOST_OFFLOADS = (
    ("tx-udp-segmentation", "tx-udp-segmentation", "off"),
    ("tcp-segmentation-offload", "tso", "off"),
    ("generic-receive-offload", "gro", "on"),
)
SWITCH_OFFLOADS = HOST_OFFLOADS[1:]


@dataclass
class LiveMininet:
    """The user's network as the engine sees it: ranks, their namespaces, the read switch ports."""

    spec: MininetSpec
    netns: dict[str, str]  # node -> the name its namespace was given
    addresses: tuple[str, ...]  # rank -> IPv4 address
    interfaces: tuple[str, ...]  # rank -> its host's interface
    rate_scale: float
    ports: tuple[EgressPort, ...]
    marker: Marker
    ledger: Ledger
    left_alone: dict[str, str] = field(default_factory=dict)  # switch -> why it is not read
    warnings: list[str] = field(default_factory=list)

    @property
    def marker_name(self) -> str:
        return self.marker.name

    @property
    def ranks(self) -> int:
        return self.spec.ranks

    def rank_netns(self, rank: int) -> str | None:
        return self.netns[self.spec.hosts[rank]]

    def rank_address(self, rank: int) -> str:
        return self.addresses[rank]

    def rank_rate_bps(self, rank: int) -> float:
        del rank
        return self.spec.rank_rate_bps * self.rate_scale

    def check_destination(self, rank: int, dst: str, ifname: str | None = None) -> None:
        """Traffic goes only to the other ranks' hosts, out of the rank's own interface."""
        if not 0 <= rank < self.ranks:
            raise ScenarioError(f"rank {rank}: the Mininet network has {self.ranks} ranks")
        if dst not in self.addresses:
            raise ScenarioError(f"destination {dst} (rank {rank}) is not a rank's Mininet host")
        if ifname is not None and ifname != self.interfaces[rank]:
            raise ScenarioError(f"interface {ifname} is not rank {rank}'s {self.interfaces[rank]}")

    def metadata(self) -> dict[str, Any]:
        return {
            "backend": "mininet",
            "marker": self.marker.name,
            "rate_scale": self.rate_scale,
            "hosts": list(self.spec.hosts),
            "switches_read": sorted({p.node for p in self.ports}),
            "switches_not_read": dict(sorted(self.left_alone.items())),
            "measured": "NIC counters of every rank; switch port counters"
            + (" and the eBPF marker" if self.marker.name == "ebpf" else "")
            + " on the switches read",
            "warnings": list(self.warnings),
        }

    def close(self) -> list[str]:
        return self.ledger.release()

    def __enter__(self) -> LiveMininet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_network(net: Any, spec: MininetSpec) -> dict[str, Any]:
    """The network's nodes by name, once every rank's host is found running in a namespace
    of its own with an IPv4 address, and every named switch exists (one line otherwise)."""
    nodes: dict[str, Any] = dict(getattr(net, "nameToNode", {}))
    if not nodes:
        raise ScenarioError("fabric kind mininet: the network object has no nodes (nameToNode)")
    for name in spec.hosts:
        _ipv4(_rank_host(nodes, name))
    _switches(nodes, spec)
    return nodes


def attach(net: Any, spec: MininetSpec, tdf: float, *, prefix: str = DEFAULT_PREFIX) -> LiveMininet:
    """Take the ranks' hosts and the readable switches of a started Mininet network `net`; on
    any error give back what was taken and re-raise."""
    nodes = check_network(net, spec)
    hosts = [nodes[name] for name in spec.hosts]
    addresses = tuple(_ipv4(h) for h in hosts)
    interfaces = tuple(str(h.defaultIntf()) for h in hosts)
    rate_scale = 1.0 / tdf
    warnings = _rate_warnings(spec, hosts, rate_scale)
    switches, left = _switches(nodes, spec)
    netns = {name: f"{prefix}{name}" for name in [*spec.hosts, *switches]}
    taken = sorted(ns for ns in netns.values() if (NETNS_DIR / ns).exists())
    if taken:
        raise EnvironmentProblem(
            f"network namespace name {taken[0]} is taken; choose another prefix than {prefix!r}"
        )
    ledger = Ledger.claim("mininet")
    try:
        return _attach(
            spec, nodes, switches, netns, addresses, interfaces, rate_scale, ledger, left, warnings
        )
    except BaseException as exc:
        try:
            ledger.release()
        except EnvironmentProblem as release_error:
            exc.add_note(f"giving the network back also failed: {release_error}")
        raise


def _attach(
    spec: MininetSpec,
    nodes: dict[str, Any],
    switches: list[str],
    netns: dict[str, str],
    addresses: tuple[str, ...],
    interfaces: tuple[str, ...],
    rate_scale: float,
    ledger: Ledger,
    left: dict[str, str],
    warnings: list[str],
) -> LiveMininet:
    pids = {name: int(nodes[name].pid) for name in netns}
    ledger.record(
        {"kind": "netns_name", "name": ns, "pid": pids[name]} for name, ns in netns.items()
    )
    run_batch([ip("netns", "attach", ns, str(pids[name])) for name, ns in netns.items()])
    offloads = [
        change
        for rank, host in enumerate(spec.hosts)
        for change in _offload_changes(netns[host], interfaces[rank], HOST_OFFLOADS)
    ]
    offloads += [
        change
        for name in switches
        for intf in nodes[name].intfList()
        if str(intf) != "lo"
        for change in _offload_changes(netns[name], str(intf), SWITCH_OFFLOADS)
    ]
    ledger.record(offloads)
    run_grouped(
        Cmd("ethtool", ("-K", o["dev"], o["feature"], o["set"]), o["netns"]) for o in offloads
    )
    ports = tuple(_switch_ports(spec, nodes, switches, netns, rate_scale))
    marker: Marker = EbpfMarker() if spec.marker == "ebpf" and ports else NoMarker()
    cmds: list[Cmd] = []
    for port in ports:
        extra, records = marker.attach(port)
        ledger.record(records)
        cmds += extra
    run_grouped(cmds)
    marker.configure(list(ports), record=ledger.record)
    return LiveMininet(
        spec, netns, addresses, interfaces, rate_scale, ports, marker, ledger, left, warnings
    )


def _rank_host(nodes: dict[str, Any], name: str) -> Any:
    node = nodes.get(name)
    if node is None:
        known = ", ".join(sorted(nodes)[:8])
        raise ScenarioError(f"fabric.hosts: no node {name!r} in the Mininet network ({known})")
    shell = getattr(node, "shell", None)
    if shell is None or shell.poll() is not None:
        raise ScenarioError(f"fabric.hosts: {name} is not running (start the network first)")
    if not getattr(node, "inNamespace", False):
        raise ScenarioError(f"fabric.hosts: {name} is in the root namespace, not a host of its own")
    return node


def _ipv4(host: Any) -> str:
    address = host.IP()
    try:
        return str(ipaddress.IPv4Address(address))
    except ValueError:
        raise ScenarioError(
            f"fabric.hosts: {host.name} has no IPv4 address ({address!r})"
        ) from None


def link_bps(intf: Any) -> float | None:
    """The rate Mininet shaped an interface to (a TCLink's bw, Mb/s), or None."""
    bw = (getattr(intf, "params", None) or {}).get("bw")
    return float(bw) * 1e6 if bw else None


def _rate_warnings(spec: MininetSpec, hosts: list[Any], rate_scale: float) -> list[str]:
    """A host link with a rate must carry the scenario's NIC rate at this TDF; one without is
    said (nothing in the network then limits the NIC but the engine's pacing)."""
    want = spec.rank_rate_bps * rate_scale
    unshaped = []
    for host in hosts:
        intf = host.defaultIntf()
        have = link_bps(intf)
        if have is None:
            unshaped.append(str(intf))
        elif abs(have - want) > RATE_TOLERANCE * want:
            raise ScenarioError(
                f"fabric.host_link_gbps: {spec.host_link_gbps:g} Gb/s at time dilation "
                f"{1 / rate_scale:g} is {want / 1e6:g} Mb/s per NIC, but {intf}'s link carries "
                f"{have / 1e6:g} Mb/s (its bw); make them agree"
            )
    if not unshaped:
        return []
    return [
        f"{', '.join(unshaped)}: no rate of its own (a plain Mininet Link): the engine paces "
        f"each NIC at {want / 1e6:g} Mb/s and nothing in the network shapes it"
    ]


def _switches(nodes: dict[str, Any], spec: MininetSpec) -> tuple[list[str], dict[str, str]]:
    """The switches to read (Linux nodes in namespaces of their own) and, for the others, why
    they are left alone."""
    names = list(spec.switches) or [
        n for n in sorted(nodes) if n not in spec.hosts and hasattr(nodes[n], "intfList")
    ]
    read: list[str] = []
    left: dict[str, str] = {}
    for name in names:
        node = nodes.get(name)
        if node is None:
            raise ScenarioError(f"fabric.switches: no node {name!r} in the Mininet network")
        kind = type(node).__name__
        if "OVS" in kind or "Controller" in kind:
            left[name] = f"{kind}: not a Linux node the run can read"
        elif not getattr(node, "inNamespace", False):
            left[name] = f"{kind} in the root namespace: its ports are not the run's to mark"
        elif getattr(node, "shell", None) is None:
            left[name] = "not running"
        else:
            read.append(name)
    return read, left


def _switch_ports(
    spec: MininetSpec,
    nodes: dict[str, Any],
    switches: list[str],
    netns: dict[str, str],
    rate_scale: float,
) -> list[EgressPort]:
    out = []
    for name in switches:
        for intf in nodes[name].intfList():
            dev = str(intf)
            if dev == "lo":
                continue
            rate_bps = link_bps(intf) or spec.port_rate_bps * rate_scale
            target_gbps = rate_bps / rate_scale / 1e9
            kmin, kmax = spec.switch.ecn.thresholds_bytes(target_gbps)
            ecn = (
                EcnThresholds(kmin, kmax, spec.switch.ecn.pmax) if spec.switch.ecn.enabled else None
            )
            mtu = int(getattr(intf, "params", {}).get("mtu", 0) or _mtu(netns[name], dev))
            out.append(
                EgressPort(
                    name,
                    netns[name],
                    dev,
                    rate_bps,
                    spec.switch.buffer_for(target_gbps),
                    mtu,
                    0.0,
                    ecn,
                    0.0,
                    spec.switch.xoff_bytes,
                )
            )
    return out


def _mtu(ns: str, dev: str) -> int:
    out = run(ip("-j", "link", "show", "dev", dev, netns=ns))
    return int(json.loads(out)[0].get("mtu", 1500))


def _offload_changes(
    ns: str, dev: str, wanted: tuple[tuple[str, str, str], ...]
) -> list[dict[str, Any]]:
    """The offloads of an interface the run must change, each recorded with the value to give
    back (a fixed feature is left as it is)."""
    shown: dict[str, str] = {}
    for line in run(Cmd("ethtool", ("-k", dev), ns)).splitlines():
        key, _, value = line.strip().partition(":")
        if value.strip() and "[fixed]" not in value:
            shown[key] = value.split()[0]
    return [
        {"kind": "offload", "netns": ns, "dev": dev, "feature": key, "value": now, "set": want}
        for name, key, want in wanted
        if (now := shown.get(name)) is not None and now != want
    ]


def read_ports(live: LiveMininet, stats: QdiscStats | None = None) -> list[Any]:
    """The read switch ports' counters (fabrics.counters.PortCounters): bytes and packets sent
    from the interface, drops from its root qdisc and the interface, the root qdisc's backlog,
    the marker's marks and phantom queue. Over rtnetlink with `stats` (a sampler's, read every
    second: fabrics/qdisc_stats.py), else from an `ip` and a `tc` process per namespace."""
    from fabrics.counters import port_counters

    by_ns: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    out = []
    for port in live.ports:
        if port.netns not in by_ns:
            if stats is None:
                by_ns[port.netns] = (_link_stats(port.netns), _root_qdiscs(port.netns))
            else:
                by_ns[port.netns] = (
                    _netlink_link_stats(stats, port.netns),
                    _roots(stats.read(port.netns)),
                )
        links, qdiscs = by_ns[port.netns]
        link = links.get(port.dev, {})
        root = qdiscs.get(port.dev, {})
        out.append(
            port_counters(
                port,
                live.marker.read(port, {}),
                tx_bytes=int(link.get("bytes", 0)),
                tx_packets=int(link.get("packets", 0)),
                drops=int(root.get("drops", 0)) + int(link.get("dropped", 0)),
                backlog_bytes=int(root.get("backlog", 0)),
            )
        )
    return out


def _link_stats(ns: str) -> dict[str, dict[str, Any]]:
    links = json.loads(run(ip("-s", "-j", "link", "show", netns=ns)) or "[]")
    return {
        str(link["ifname"]): dict(link.get("stats64", {}).get("tx", {}))
        for link in links
        if "ifname" in link
    }


def _netlink_link_stats(stats: QdiscStats, ns: str) -> dict[str, dict[str, Any]]:
    """_link_stats over rtnetlink: the transmit side of `ip -s -j link show`'s stats64."""
    return {
        name: {"bytes": link.tx_bytes, "packets": link.tx_packets, "dropped": link.tx_dropped}
        for name, link in stats.links(ns).items()
        if link.stats
    }


def _root_qdiscs(ns: str) -> dict[str, dict[str, Any]]:
    return _roots(json.loads(run(tc("-s", "-j", "qdisc", "show", netns=ns)) or "[]"))


def _roots(qdiscs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(q["dev"]): q for q in qdiscs if q.get("root") and "dev" in q}
