"""What an AF_XDP port needs from the kernel before it opens, and the one-line refusals.

Frame arithmetic (how big a RoCEv2 frame gets at a path MTU, whether it needs AF_XDP
multi-buffer), the interface's state (exists, up, Ethernet, its addresses, MTU, queues, an XDP
program already there), the Ethernet next hop of a flow from the kernel's route and neighbour
tables (resolved with one ARP probe when missing), and the XDP program's object file (compiled
with clang -target bpf at first use and cached by source hash, as fabrics/ecn/ebpf.py does).
emulator/engine/af_xdp.py opens the port itself.
"""

from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import json
import os
import platform
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem
from emulator.native.bpf_object import compiled
from emulator.netns import entered
from emulator.transport.packets import (
    BTH_BYTES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    RETH_BYTES,
    UDP_HEADER_BYTES,
)

PROGRAM_SOURCE = Path(__file__).resolve().parents[1] / "native" / "xsk_rocev2.bpf.c"
ETHERNET_HEADER_BYTES = 14
FRAME_HEADER_BYTES = ETHERNET_HEADER_BYTES + IPV4_HEADER_BYTES + UDP_HEADER_BYTES
# Copy mode keeps XDP_PACKET_HEADROOM (256 bytes, uapi linux/bpf.h) free in front of a received
# frame, so a UMEM chunk holds that much less on receive (af_xdp.rst, "UMEM").
XDP_PACKET_HEADROOM = 256
MULTI_BUFFER_KERNEL = (6, 6)  # XDP_USE_SG: AF_XDP multi-buffer, af_xdp.rst "Multi-Buffer Support"


class AfXdpUnavailable(EnvironmentProblem):
    """af_xdp cannot run on this interface; the message is one line naming it and why."""


def where(ifname: str, netns: str | None) -> str:
    return f"{ifname} (namespace {netns})" if netns else ifname


def refuse(ifname: str, netns: str | None, reason: str) -> AfXdpUnavailable:
    return AfXdpUnavailable(f"engine.send_path af_xdp on {where(ifname, netns)}: {reason}")


# --- frames -------------------------------------------------------------------------------


def max_udp_payload_bytes(path_mtu_bytes: int) -> int:
    """The largest RoCEv2 UDP payload the engine sends at this path MTU: a WRITE first/only
    (BTH + RETH + a full payload + ICRC)."""
    return BTH_BYTES + RETH_BYTES + path_mtu_bytes + ICRC_BYTES


def max_frame_bytes(path_mtu_bytes: int) -> int:
    """The largest Ethernet frame (FCS excluded) at this path MTU."""
    return FRAME_HEADER_BYTES + max_udp_payload_bytes(path_mtu_bytes)


def frame_room(frame_bytes: int) -> tuple[int, int]:
    """(receive, transmit) bytes of a frame that one UMEM chunk of `frame_bytes` holds."""
    return frame_bytes - XDP_PACKET_HEADROOM, frame_bytes


def needs_multi_buffer(path_mtu_bytes: int, frame_bytes: int) -> bool:
    rx_room, tx_room = frame_room(frame_bytes)
    return max_frame_bytes(path_mtu_bytes) > min(rx_room, tx_room)


def multi_buffer_refusal(path_mtu_bytes: int, frame_bytes: int, why: str) -> str:
    """The one line for a path MTU whose frames need multi-buffer where it is unavailable."""
    rx_room, _ = frame_room(frame_bytes)
    largest = max(m for m in (256, 512, 1024, 2048, 4096) if not needs_multi_buffer(m, frame_bytes))
    return (
        f"path MTU {path_mtu_bytes} needs frames of {max_frame_bytes(path_mtu_bytes)} bytes; "
        f"this build's UMEM frame holds {rx_room} on receive and multi-buffer (XDP_USE_SG) is "
        f"unavailable ({why}); use transport.path_mtu_bytes <= {largest} or "
        "engine.send_path udp_gso"
    )


def kernel_release() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


# --- the interface ------------------------------------------------------------------------


def _ip(netns: str | None, *args: str, check: bool = True) -> str:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError:
        raise EnvironmentProblem("`ip` (iproute2) is not installed") from None
    if check and proc.returncode != 0:
        raise EnvironmentProblem(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return proc.stdout if proc.returncode == 0 else ""


@dataclass(frozen=True)
class LinkState:
    """What af_xdp needs to know of an interface, from `ip -d -j link` and `ip -j addr`."""

    ifname: str
    netns: str | None
    ifindex: int
    up: bool
    ethernet: bool
    mac: bytes
    mtu_bytes: int
    rx_queues: int
    tx_queues: int
    xdp_prog_id: int  # a program already attached (0: none)
    addresses: frozenset[str]


def _attached_prog(info: dict[str, Any]) -> int:
    xdp = info.get("xdp") or {}
    if "prog" in xdp:
        return int(xdp["prog"].get("id", 0))
    for entry in xdp.get("attached", []):
        if "prog" in entry:
            return int(entry["prog"].get("id", 0))
    return 0


def link_state(ifname: str, netns: str | None) -> LinkState:
    if netns and not os.path.exists(os.path.join("/run/netns", netns)):
        raise refuse(ifname, netns, "no such network namespace")
    out = _ip(netns, "-d", "-j", "link", "show", "dev", ifname, check=False)
    if not out.strip():
        raise refuse(ifname, netns, "no such interface")
    info = json.loads(out)[0]
    addrs = json.loads(_ip(netns, "-j", "-4", "addr", "show", "dev", ifname) or "[]")
    local = frozenset(
        a["local"] for entry in addrs for a in entry.get("addr_info", []) if "local" in a
    )
    mac = bytes.fromhex(str(info.get("address", "")).replace(":", ""))
    return LinkState(
        ifname,
        netns,
        int(info["ifindex"]),
        "UP" in info.get("flags", []) and info.get("operstate") != "DOWN",
        info.get("link_type") == "ether" and len(mac) == 6,
        mac,
        int(info.get("mtu", 0)),
        int(info.get("num_rx_queues", 1)),
        int(info.get("num_tx_queues", 1)),
        _attached_prog(info),
        local,
    )


_ETHTOOL_CHANNELS = struct.Struct("=9I")  # struct ethtool_channels, uapi linux/ethtool.h
SIOCETHTOOL = 0x8946
ETHTOOL_GCHANNELS = 0x3C


def rx_queues_in_use(ifname: str, netns: str | None) -> int:
    """The receive queues the interface uses now (ETHTOOL_GCHANNELS: rx + combined channels;
    1 for a driver without channels), which its traffic can arrive on: af_xdp binds a socket
    to each (a veth allocates one per CPU but uses 1 unless told otherwise)."""
    buf = ctypes.create_string_buffer(_ETHTOOL_CHANNELS.pack(ETHTOOL_GCHANNELS, *[0] * 8))
    ifreq = struct.pack("16sP", ifname.encode()[:15], ctypes.addressof(buf)).ljust(40, b"\0")
    with entered(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    except OSError:
        return 1
    finally:
        sock.close()
    fields = _ETHTOOL_CHANNELS.unpack_from(buf.raw)
    return max(1, fields[5] + fields[8])


def attached_prog_id(ifname: str, netns: str | None) -> int:
    """The id of the XDP program on the interface now (0: none, or no such interface)."""
    out = _ip(netns, "-d", "-j", "link", "show", "dev", ifname, check=False)
    return _attached_prog(json.loads(out)[0]) if out.strip() else 0


# --- the next hop -------------------------------------------------------------------------

_USABLE = {"REACHABLE", "STALE", "DELAY", "PROBE", "PERMANENT", "NOARP"}


def _neighbour(netns: str | None, ifname: str, address: str) -> bytes | None:
    rows = json.loads(_ip(netns, "-j", "neigh", "show", "to", address, "dev", ifname) or "[]")
    for row in rows:
        if row.get("lladdr") and _USABLE.intersection(row.get("state", [])):
            return bytes.fromhex(str(row["lladdr"]).replace(":", ""))
    return None


def next_hop_mac(ifname: str, netns: str | None, src: str, dst: str, probe_s: float = 1.0) -> bytes:
    """The destination MAC for packets src -> dst: the neighbour entry of the route's gateway,
    or of dst itself on a connected route; when there is none, one ARP probe (a neighbour
    entry with NTF_USE: the kernel resolves it, no IP packet is sent) and a bounded wait."""
    try:
        ipaddress.IPv4Address(dst)
    except ValueError:
        raise refuse(ifname, netns, f"destination {dst!r} is not an IPv4 address") from None
    rows = json.loads(_ip(netns, "-j", "route", "get", dst, "from", src, check=False) or "[]")
    if not rows:
        raise refuse(ifname, netns, f"no route from {src} to {dst}")
    route = rows[0]
    if route.get("dev") != ifname:
        raise refuse(
            ifname, netns, f"the route to {dst} leaves through {route.get('dev')}, not {ifname}"
        )
    hop = str(route.get("gateway", dst))
    mac = _neighbour(netns, ifname, hop)
    if mac is not None:
        return mac
    _ip(netns, "neigh", "replace", hop, "dev", ifname, "use", check=False)
    deadline = time.monotonic() + probe_s
    while time.monotonic() < deadline:
        time.sleep(0.01)
        mac = _neighbour(netns, ifname, hop)
        if mac is not None:
            return mac
    raise refuse(
        ifname,
        netns,
        f"next hop {hop} (toward {dst}) did not answer ARP within {probe_s:g} s: "
        "no MAC address to send to",
    )


# --- the XDP program ----------------------------------------------------------------------


def program_object() -> Path:
    """The XDP program's object file, compiled with clang at first use, cached by source hash."""
    return compiled(PROGRAM_SOURCE, "xsk_rocev2", what="the AF_XDP port's XDP program")
