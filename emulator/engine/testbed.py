"""Small veth testbeds for the engine's system tests and benchmark: namespaces it creates, owns
and removes by handle (never by name pattern).

`pair()`: two namespaces joined by a veth. `routed()`: sender -- router -- receiver, where the
router's egress toward the receiver can be shaped (HTB) and ECN-marked. Host interfaces get
the settings measured for docs/architecture.md, "Data path speed": UDP segmentation offload off (so the wire
carries real MTU-sized packets) and, on the receiving side, GRO with UDP GRO forwarding and
optionally threaded NAPI (so a UDP_GRO socket gets coalesced reads).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from emulator.errors import EnvironmentProblem


def _run(argv: Sequence[str], *, input_text: str | None = None) -> str:
    proc = subprocess.run(
        list(argv), capture_output=True, text=True, input=input_text, timeout=30, check=False
    )
    if proc.returncode != 0:
        raise EnvironmentProblem(f"`{' '.join(argv)}` failed: {proc.stderr.strip()}")
    return proc.stdout


@dataclass
class NetnsBed:
    """Namespaces created here, deleted in reverse order by close() (their veths go with them)."""

    # pid plus a random token: a killed run's leftovers never collide with a later run's names
    prefix: str = field(default_factory=lambda: f"eng{os.getpid() % 100000}{secrets.token_hex(2)}-")
    namespaces: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)

    def netns(self, role: str) -> str:
        name = f"{self.prefix}{role}"
        _run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])
        return name

    def ns_run(self, netns: str, *argv: str, input_text: str | None = None) -> str:
        return _run(["ip", "netns", "exec", netns, *argv], input_text=input_text)

    def link(
        self, ns_a: str, if_a: str, addr_a: str, ns_b: str, if_b: str, addr_b: str, mtu: int
    ) -> None:
        """A veth between two namespaces, addressed (CIDR) and up."""
        _run(
            [
                "ip",
                "link",
                "add",
                if_a,
                "netns",
                ns_a,
                "mtu",
                str(mtu),
                "type",
                "veth",
                "peer",
                "name",
                if_b,
                "netns",
                ns_b,
                "mtu",
                str(mtu),
            ]
        )
        for ns, ifname, addr in ((ns_a, if_a, addr_a), (ns_b, if_b, addr_b)):
            _run(["ip", "-n", ns, "addr", "add", addr, "dev", ifname])
            _run(["ip", "-n", ns, "link", "set", ifname, "up"])
            self.addresses[f"{ns}/{ifname}"] = addr.split("/")[0]

    def host_offloads(self, netns: str, ifname: str, *, threaded_napi: bool = False) -> None:
        """No UDP segmentation offload (real MTU packets on the wire); GRO for UDP_GRO sockets.

        Threaded NAPI stays off by default: measured here on 2 busy cores, the NAPI thread was
        not scheduled for milliseconds at a time and the veth's 256-entry ring overflowed
        (drops counted as TX drops of the peer); softirq NAPI runs right after each send."""
        self.ns_run(netns, "ethtool", "-K", ifname, "tx-udp-segmentation", "off", "tso", "off")
        self.ns_run(netns, "ethtool", "-K", ifname, "gro", "on", "rx-udp-gro-forwarding", "on")
        if threaded_napi:
            self.ns_run(netns, "tee", f"/sys/class/net/{ifname}/threaded", input_text="1")

    def close(self) -> None:
        errors = []
        while self.namespaces:
            name = self.namespaces.pop()
            try:
                _run(["ip", "netns", "del", name])
            except EnvironmentProblem as e:
                errors.append(str(e))
        if errors:
            raise EnvironmentProblem("; ".join(errors))

    def __enter__(self) -> NetnsBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class PairInfo:
    sender_ns: str
    receiver_ns: str
    sender_if: str
    receiver_if: str
    sender_addr: str
    receiver_addr: str


def pair(bed: NetnsBed, *, mtu: int = 9000, subnet: str = "10.77.0") -> PairInfo:
    """Two namespaces `a` and `b` joined by veth a0 -- b0."""
    a, b = bed.netns("a"), bed.netns("b")
    bed.link(a, "a0", f"{subnet}.1/24", b, "b0", f"{subnet}.2/24", mtu)
    bed.host_offloads(a, "a0")
    bed.host_offloads(b, "b0")
    return PairInfo(a, b, "a0", "b0", f"{subnet}.1", f"{subnet}.2")


@dataclass(frozen=True)
class RoutedInfo:
    sender_ns: str
    router_ns: str
    receiver_ns: str
    sender_addr: str
    receiver_addr: str
    router_egress_if: str  # toward the receiver: where a bottleneck goes
    receiver_if: str


def routed(bed: NetnsBed, *, mtu: int = 9000) -> RoutedInfo:
    """a (10.78.1.1) -- r -- b (10.78.2.1); r forwards and its r1 faces b."""
    a, r, b = bed.netns("a"), bed.netns("r"), bed.netns("b")
    bed.link(a, "a0", "10.78.1.1/24", r, "r0", "10.78.1.254/24", mtu)
    bed.link(r, "r1", "10.78.2.254/24", b, "b0", "10.78.2.1/24", mtu)
    bed.ns_run(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    _run(["ip", "-n", a, "route", "add", "default", "via", "10.78.1.254"])
    _run(["ip", "-n", b, "route", "add", "default", "via", "10.78.2.254"])
    bed.host_offloads(a, "a0")
    bed.host_offloads(b, "b0")
    # The router marks/queues per packet: it never merges forwarded UDP (docs/architecture.md, "Pitfalls": GSO/GRO
    # pitfalls). GRO on with TSO off on every veth puts receives on NAPI, which keeps a flow's
    # packets in order (fabrics/netns.py says why).
    for ifname in ("r0", "r1"):
        bed.ns_run(
            r,
            "ethtool",
            "-K",
            ifname,
            "tx-udp-segmentation",
            "off",
            "gro",
            "on",
            "rx-udp-gro-forwarding",
            "off",
            "rx-gro-list",
            "off",
        )
    return RoutedInfo(a, r, b, "10.78.1.1", "10.78.2.1", "r1", "b0")


def link_bytes(netns: str, ifname: str) -> tuple[int, int]:
    """(rx_bytes, tx_bytes) of an interface as the kernel counts them (Ethernet header included)."""
    out = _run(["ip", "-n", netns, "-s", "-j", "link", "show", "dev", ifname])
    stats = json.loads(out)[0]["stats64"]
    return int(stats["rx"]["bytes"]), int(stats["tx"]["bytes"])


class Capture:
    """tcpdump on one interface of a namespace into a pcap file (full packets), owned by PID."""

    def __init__(self, netns: str, ifname: str, path: str, bpf_filter: str = "udp port 4791"):
        self.path = path
        self.proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                netns,
                "tcpdump",
                "-i",
                ifname,
                "-w",
                path,
                "-s",
                "0",
                "-B",
                "262144",
                "-U",
                "--immediate-mode",
                "-n",
                bpf_filter,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # "listening on IF ..." once the socket is open
        if "listening" not in line:
            self.proc.kill()
            self.proc.wait(5)
            raise EnvironmentProblem(f"tcpdump on {netns}/{ifname} did not start: {line.strip()}")
        self.kernel_drops: int | None = None

    def stop(self, settle_s: float = 0.2, limit_s: float = 3.0) -> None:
        """Stop once the file stopped growing for settle_s (tcpdump drains its ring first)."""
        deadline = time.monotonic() + limit_s
        size = -1
        while time.monotonic() < deadline:
            now_size = os.path.getsize(self.path) if os.path.exists(self.path) else 0
            if now_size == size:
                break
            size = now_size
            time.sleep(settle_s)
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=5)
        m = re.search(r"(\d+) packets? dropped by kernel", err or "")
        self.kernel_drops = int(m.group(1)) if m else None


def read_pcap_ipv4(path: str) -> list[bytes]:
    """The IPv4 packets of an Ethernet pcap file, in capture order."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack_from("<I", data, 0)[0]
    order = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack_from(order + "I", data, 20)[0]
    if linktype != 1:
        raise EnvironmentProblem(f"{path}: link type {linktype} is not Ethernet")
    out: list[bytes] = []
    at = 24
    record = struct.Struct(order + "IIII")
    while at + 16 <= len(data):
        _, _, incl, _ = record.unpack_from(data, at)
        frame = data[at + 16 : at + 16 + incl]
        at += 16 + incl
        if len(frame) > 14 and frame[12:14] == b"\x08\x00":
            out.append(frame[14:])
    return out
