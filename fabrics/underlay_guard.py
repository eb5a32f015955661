"""A packet filter that lets the underlay carry VXLAN only between the cluster's own servers.

Linux binds a VXLAN device's UDP socket to every address of its namespace and hands an arriving
frame to the device whose VNI it carries, whatever the outer source address (`remote` and
`nolearning` only choose where this end sends: drivers/net/vxlan/vxlan_core.c vxlan_rcv looks
the device up by VNI alone). The VNIs are predictable (fabrics/vxlan.py: vni_base + the cable's
index), so without a filter any host that reaches UDP 4789 of a server could put frames, spoofed
RoCEv2 packets to the ranks included, into the emulated fabric.

One nftables table per underlay namespace (the root one on a real server) drops, on the input
hook, every frame to a tunnel's UDP port carrying one of this part's VNIs unless it comes from
that tunnel's remote underlay address. The input hook sees packets after reassembly
(ip_local_deliver defragments first) and before the UDP socket's encapsulation handler, so a
dropped frame never reaches the device. Frames for other VNIs are not this run's to judge: a
server's own VXLAN (an overlay network, say) keeps working. The table is recorded in the run's
ledger (fabrics/ownership.py) before it is made and released with the run; it is made before
the tunnels and released after them, so no tunnel is ever open to strangers.

What this does not stop: a host that can send packets with a peer server's underlay address as
their source (on the underlay's own segment, or where the network lets spoofed sources through).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from emulator.errors import EnvironmentProblem
from fabrics.iproute import Cmd
from fabrics.vxlan import TunnelEnd

RESOURCE_KIND = "nft_table"
FAMILY = "ip"  # the underlay is IPv4 (TunnelEnd refuses anything else)
# The VNI's place in the outer UDP payload: after the UDP header (8 bytes) and the VXLAN header's
# flags and reserved bytes (4), 24 bits (RFC 7348 section 5): nftables' raw payload in bits.
VNI_AT_BITS = (8 + 4) * 8
VNI_BITS = 24
CHAIN = "underlay_in"


@dataclass(frozen=True)
class UnderlayGuard:
    """The filter of one underlay namespace: (UDP port, VNI, remote address) of each tunnel."""

    netns: str | None  # None: the root namespace (a real server's NIC)
    table: str
    tunnels: tuple[tuple[int, int, str], ...]

    def create(self) -> Cmd:
        """One nft transaction: `create` refuses a table of that name, then the table whole."""
        vni = f"@th,{VNI_AT_BITS},{VNI_BITS}"
        ours = ", ".join(f"{port} . {v:#x}" for port, v, _ in self.tunnels)
        allowed = ", ".join(f"{port} . {v:#x} . {remote}" for port, v, remote in self.tunnels)
        script = (
            f"create table {FAMILY} {self.table}; "
            f"table {FAMILY} {self.table} {{ "
            f"set vnis {{ typeof udp dport . {vni}; elements = {{ {ours} }}; }}; "
            f"set peers {{ typeof udp dport . {vni} . ip saddr; elements = {{ {allowed} }}; }}; "
            # priority raw: before connection tracking makes an entry for what is dropped
            f"chain {CHAIN} {{ type filter hook input priority raw; policy accept; "
            f"udp dport . {vni} @vnis udp dport . {vni} . ip saddr != @peers counter drop; }}; "
            "}"
        )
        return Cmd("nft", (script,), self.netns)

    def record(self) -> dict[str, str | None]:
        return {"kind": RESOURCE_KIND, "netns": self.netns, "family": FAMILY, "name": self.table}


def underlay_guards(tunnels: Iterable[TunnelEnd], pid: int | None = None) -> list[UnderlayGuard]:
    """A guard per underlay namespace of these tunnel ends. The table's name holds this process
    and the namespace's lowest VNI of the part: one VNI has one device per namespace and port, so
    two parts in one namespace (two servers' actors on one machine) never share a name."""
    by_netns: dict[str | None, list[TunnelEnd]] = {}
    for t in tunnels:
        by_netns.setdefault(t.underlay_netns, []).append(t)
    pid = os.getpid() if pid is None else pid
    out = []
    for netns, ends in sorted(by_netns.items(), key=lambda kv: str(kv[0])):
        ends.sort(key=lambda t: (t.dstport, t.vni))
        table = f"chakra_vxlan_{pid:x}_{ends[0].vni:x}"
        out.append(
            UnderlayGuard(netns, table, tuple((t.dstport, t.vni, t.remote_ip) for t in ends))
        )
    return out


def check_guard_tool() -> None:
    """Tunnels are refused, not left open, where the filter cannot be made."""
    if shutil.which("nft") is None:
        raise EnvironmentProblem(
            "VXLAN tunnels between servers need nftables' `nft` to accept frames only from the "
            "cluster's own underlay addresses (fabrics/underlay_guard.py): install nftables "
            "(./setup.sh does)"
        )


def release_cmd(resource: dict[str, str | None]) -> Cmd:
    return Cmd("nft", (f"delete table {resource['family']} {resource['name']}",), resource["netns"])


def exists_cmd(resource: dict[str, str | None]) -> Cmd:
    return Cmd("nft", (f"list table {resource['family']} {resource['name']}",), resource["netns"])


def dropped_cmd(guard: UnderlayGuard) -> Cmd:
    """The drop rule's counter, as JSON (`nft -j`)."""
    return Cmd("nft", ("-j", f"list chain {FAMILY} {guard.table} {CHAIN}"), guard.netns)


def dropped_packets(nft_json: str) -> int:
    """Frames the guard dropped, from `dropped_cmd`'s output."""
    total = 0
    for item in json.loads(nft_json or "{}").get("nftables", []):
        for expr in (item.get("rule") or {}).get("expr", []):
            if "counter" in expr:
                total += int(expr["counter"].get("packets", 0))
    return total
