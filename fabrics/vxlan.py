"""One Clos split over several servers: the part each server hosts, and VXLAN for the cables between.

Each server brings up the nodes its `FabricPart` names (fabrics/netns.py bring_up). A cable with
both ends local is a veth pair as usual; a cable with one end local is a VXLAN tunnel end over
the server's "underlay" interface (RFC 7348): an Ethernet device with the port's name, MAC,
address and MTU, on which HTB and the ECN marker sit exactly as on a veth, since at its egress
they see the inner frames before encapsulation. Both servers derive the same tunnels from the
same topology and owner map (`plan_parts`): the VNI is `vni_base` + the cable's index.

A tunnel end is created under a temporary name in the underlay's namespace (the namespace whose
UDP socket carries it, and where it stays bound however it moves), then moved into its node's
namespace and renamed to the port's name in one command. Both names are recorded in the ledger
before the command that makes them, so a SIGKILL in between leaves nothing unrecorded.
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.errors import EnvironmentProblem, ScenarioError
from fabrics.iproute import Cmd, existing_netns, ip, run, run_grouped
from fabrics.topology import Cable, Topology

VXLAN_UDP_PORT = 4789  # IANA "vxlan" (RFC 7348 section 5)
# What VXLAN over IPv4 adds to an inner IP packet: outer IPv4 20 + UDP 8 + VXLAN 8 + the inner
# Ethernet header 14 (RFC 7348 section 5; VXLAN_HEADROOM in include/net/vxlan.h).
VXLAN_OVERHEAD_BYTES = 50
VNI_MAX = (1 << 24) - 1  # 24-bit VXLAN Network Identifier
DEFAULT_VNI_BASE = 1 << 20  # clear of the small VNIs usually configured by hand
RESOURCE_KIND = "vxlan"

Resource = dict[str, Any]
# A server's underlay: (its local IPv4 address, the interface, its namespace; None: the root one)
Underlay = tuple[str, str, str | None]


@dataclass(frozen=True)
class TunnelEnd:
    """This server's end of one cable whose other end is on another server."""

    vni: int
    local_ip: str
    remote_ip: str
    underlay_dev: str
    underlay_netns: str | None = None  # None: the root namespace (a real server's NIC)
    dstport: int = VXLAN_UDP_PORT

    def __post_init__(self) -> None:
        if not 1 <= self.vni <= VNI_MAX:
            raise ScenarioError(f"VXLAN VNI {self.vni}: must be 1..{VNI_MAX}")
        if not 1 <= self.dstport <= 65535:
            raise ScenarioError(f"VXLAN dstport {self.dstport}: must be 1..65535")
        for name in ("local_ip", "remote_ip"):
            try:
                ipaddress.IPv4Address(getattr(self, name))
            except ValueError:
                raise ScenarioError(
                    f"VXLAN {name} {getattr(self, name)!r} (VNI {self.vni}) is not an IPv4 address"
                ) from None
        if self.local_ip == self.remote_ip:
            raise ScenarioError(f"VXLAN VNI {self.vni}: local and remote are both {self.local_ip}")

    @property
    def temp_name(self) -> str:
        """The device's name in the underlay's namespace before it moves: this process's and the
        VNI's (unique there, as the kernel allows one device per VNI and port), under 16 bytes."""
        return f"x{os.getpid():x}-{self.vni:x}"


@dataclass(frozen=True)
class FabricPart:
    """The topology nodes one server hosts, and a tunnel end for each cable (index into
    `topology.cables`) with exactly one end among them."""

    nodes: frozenset[str]
    tunnels: Mapping[int, TunnelEnd]

    def __post_init__(self) -> None:
        seen: dict[tuple[str | None, int, int], int] = {}
        for index, t in sorted(self.tunnels.items()):
            key = (t.underlay_netns, t.dstport, t.vni)
            if key in seen:
                raise ScenarioError(
                    f"cables {seen[key]} and {index}: both use VXLAN VNI {t.vni} on port "
                    f"{t.dstport}; each cable needs its own"
                )
            seen[key] = index

    def check(self, topology: Topology) -> None:
        """Every cross-server cable has a tunnel, and only those."""
        unknown = sorted(self.nodes - set(topology.node_by_name))
        if unknown:
            raise ScenarioError(f"fabric part: node {unknown[0]} is not in the topology")
        if not self.nodes:
            raise ScenarioError("fabric part: no nodes")
        for index in sorted(self.tunnels):
            if not 0 <= index < len(topology.cables):
                raise ScenarioError(
                    f"fabric part: tunnel for cable {index}, but the topology has "
                    f"{len(topology.cables)} cables"
                )
        for index, cable in enumerate(topology.cables):
            local = (cable.a.node in self.nodes) + (cable.b.node in self.nodes)
            if local == 1 and index not in self.tunnels:
                raise ScenarioError(
                    f"fabric part: cable {index} ({_ends(cable)}) has one end on this server "
                    "but no tunnel"
                )
            if local != 1 and index in self.tunnels:
                where = "both ends" if local == 2 else "no end"
                raise ScenarioError(
                    f"fabric part: cable {index} ({_ends(cable)}) has {where} on this server "
                    "and needs no tunnel"
                )

    def metadata(self) -> dict[str, Any]:
        return {
            "local_nodes": len(self.nodes),
            "tunnels": [
                {
                    "cable": index,
                    "vni": t.vni,
                    "local_ip": t.local_ip,
                    "remote_ip": t.remote_ip,
                    "underlay_dev": t.underlay_dev,
                }
                for index, t in sorted(self.tunnels.items())
            ],
        }


def _ends(cable: Cable) -> str:
    return f"{cable.a.node}:{cable.a.ifname} - {cable.b.node}:{cable.b.ifname}"


def plan_parts(
    topology: Topology,
    owner: Mapping[str, str],
    underlay: Mapping[str, Underlay],
    *,
    vni_base: int = DEFAULT_VNI_BASE,
    dstport: int = VXLAN_UDP_PORT,
) -> dict[str, FabricPart]:
    """Each server's part, from which server owns each node (`owner`: node -> server) and each
    server's underlay (server -> (ip, dev, netns)). Pure: every server computes the same plan,
    so both ends of a cable get the same VNI (vni_base + cable index), local and remote swapped."""
    missing = [n.name for n in topology.nodes if n.name not in owner]
    if missing:
        raise ScenarioError(f"node {missing[0]} has no server ({len(missing)} nodes unassigned)")
    unknown = sorted(set(owner) - set(topology.node_by_name))
    if unknown:
        raise ScenarioError(f"node {unknown[0]} is assigned a server but not in the topology")
    tunnels: dict[str, dict[int, TunnelEnd]] = {server: {} for server in owner.values()}
    for index, cable in enumerate(topology.cables):
        a, b = owner[cable.a.node], owner[cable.b.node]
        if a == b:
            continue
        vni = vni_base + index
        if not 1 <= vni <= VNI_MAX:
            raise ScenarioError(f"vni_base {vni_base}: cable {index} would get VNI {vni}")
        for server in (a, b):
            if server not in underlay:
                raise ScenarioError(
                    f"server {server} has no underlay (ip, dev, netns) but hosts cable {index} "
                    f"({_ends(cable)}) to another server"
                )
        (ip_a, dev_a, ns_a), (ip_b, dev_b, ns_b) = underlay[a], underlay[b]
        tunnels[a][index] = TunnelEnd(vni, ip_a, ip_b, dev_a, ns_a, dstport)
        tunnels[b][index] = TunnelEnd(vni, ip_b, ip_a, dev_b, ns_b, dstport)
    parts: dict[str, FabricPart] = {}
    for server in tunnels:
        nodes = frozenset(n for n, s in owner.items() if s == server)
        parts[server] = FabricPart(nodes, tunnels[server])
        parts[server].check(topology)
    return parts


@dataclass(frozen=True)
class TunnelDevice:
    """One tunnel end as it is made: `tunnel.temp_name` in the underlay's namespace, then moved
    into `netns` as `ifname`, with the cable end's MAC (so the static neighbour entries of the
    far end hold) and the fabric's MTU."""

    tunnel: TunnelEnd
    mac: str
    mtu_bytes: int
    netns: str
    ifname: str

    def create(self) -> Cmd:
        t = self.tunnel
        return ip(
            "link",
            "add",
            "name",
            t.temp_name,
            "address",
            self.mac,
            "mtu",
            str(self.mtu_bytes),
            "type",
            "vxlan",
            "id",
            str(t.vni),
            "local",
            t.local_ip,
            "remote",
            t.remote_ip,
            "dstport",
            str(t.dstport),
            "dev",
            t.underlay_dev,
            # The remote is fixed: nothing to learn from what arrives.
            "nolearning",
            # The outer header carries the inner DSCP (CNPs keep their priority on the underlay);
            # ECN per RFC 6040: inner ECT copied out, inner CE sent as ECT(0), and an outer CE
            # copied into an ECT inner packet at decapsulation (include/net/inet_ecn.h).
            "tos",
            "inherit",
            netns=t.underlay_netns,
        )

    def move(self) -> Cmd:
        t = self.tunnel
        return ip(
            "link",
            "set",
            "dev",
            t.temp_name,
            "netns",
            self.netns,
            "name",
            self.ifname,
            netns=t.underlay_netns,
        )

    def records(self) -> tuple[Resource, Resource]:
        """The ledger entries: under the temporary name, then under the final one."""
        t = self.tunnel
        return (
            {"kind": RESOURCE_KIND, "netns": t.underlay_netns, "name": t.temp_name},
            {"kind": RESOURCE_KIND, "netns": self.netns, "name": self.ifname},
        )


def tunnel_devices(
    topology: Topology,
    part: FabricPart,
    netns: Mapping[str, str],
    mac: Callable[[int, int], str],
) -> list[TunnelDevice]:
    """The part's tunnel ends; `mac(index, end)` is the MAC of end 0 (cable.a) or 1 (cable.b)."""
    out: list[TunnelDevice] = []
    for index, tunnel in sorted(part.tunnels.items()):
        cable = topology.cables[index]
        end = 0 if cable.a.node in part.nodes else 1
        port = (cable.a, cable.b)[end]
        out.append(
            TunnelDevice(tunnel, mac(index, end), topology.mtu_bytes, netns[port.node], port.ifname)
        )
    return out


def make_tunnels(devices: Sequence[TunnelDevice], record: Callable[[list[Resource]], None]) -> None:
    """Create every tunnel end in its underlay's namespace, then move each into its node's
    namespace under the port's name; each name recorded before the command that makes it."""
    record([d.records()[0] for d in devices])
    run_grouped(d.create() for d in devices)
    record([d.records()[1] for d in devices])
    run_grouped(d.move() for d in devices)


def check_underlays(tunnels: Iterable[TunnelEnd], mtu_bytes: int) -> None:
    """Before anything is created: each underlay interface exists (in its namespace), is up,
    has the local address, and carries the fabric's MTU plus VXLAN's overhead."""
    need = mtu_bytes + VXLAN_OVERHEAD_BYTES
    namespaces = existing_netns()
    for local_ip, dev, ns in sorted(
        {(t.local_ip, t.underlay_dev, t.underlay_netns) for t in tunnels}, key=str
    ):
        where = f" in namespace {ns}" if ns else ""
        if ns is not None and ns not in namespaces:
            raise EnvironmentProblem(f"underlay namespace {ns} (of {dev}) does not exist")
        out = run(ip("-j", "addr", "show", "dev", dev, netns=ns), check=False)
        links = json.loads(out) if out.strip() else []
        if not links:
            raise EnvironmentProblem(f"underlay interface {dev}{where} does not exist")
        link = links[0]
        if "UP" not in link.get("flags", ()) or link.get("operstate") == "DOWN":
            raise EnvironmentProblem(
                f"underlay interface {dev}{where} is down (state {link.get('operstate')}); "
                f"bring it up (ip link set dev {dev} up) and check its cable"
            )
        addresses = [a["local"] for a in link.get("addr_info", ()) if a.get("family") == "inet"]
        if local_ip not in addresses:
            raise EnvironmentProblem(
                f"underlay interface {dev}{where} has no address {local_ip} "
                f"(it has {', '.join(addresses) or 'no IPv4 address'})"
            )
        mtu = int(link.get("mtu", 0))
        if mtu < need:
            raise EnvironmentProblem(
                f"underlay interface {dev}{where} has MTU {mtu}: the fabric's {mtu_bytes} over "
                f"VXLAN needs at least {need} ({VXLAN_OVERHEAD_BYTES} bytes of encapsulation) "
                f"here and on the path between the servers, or a fabric.mtu_bytes of at most "
                f"{mtu - VXLAN_OVERHEAD_BYTES}"
            )
