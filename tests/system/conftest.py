"""Shared fixtures and helpers for system tests (root, network namespaces, tc, BPF).

Tests skip with a visible reason when not root or when a needed tool is missing, and fail instead
in CI (tests/system/prereq.py), where setup.sh installed every tool. Each test gets its own state file and
namespace prefix, so it never touches a fabric someone else brought up.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from emulator.engine.testbed import NetnsBed, PairInfo, pair
from fabrics.iproute import in_netns
from tests.system.prereq import require

SYSTEM_TOOLS = ("ip", "tc", "ethtool", "bpftool", "clang")
IP_RECVTOS = getattr(socket, "IP_RECVTOS", 13)
SO_RCVBUFFORCE = 33  # include/uapi/asm-generic/socket.h
ECT0_TOS = 0x02
CE = 0x03


@pytest.fixture
def system() -> None:
    """Skip (with the reason shown by -ra) unless root with the tools setup.sh installs."""
    if os.geteuid() != 0:
        require("system test needs root (network namespaces, tc, BPF)")
    missing = [t for t in SYSTEM_TOOLS if shutil.which(t) is None]
    if missing:
        require(f"system test needs {', '.join(missing)} (run ./setup.sh)")


@pytest.fixture
def fabric_env(system: None, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private state file and namespace prefix for one test; yields the prefix."""
    monkeypatch.setenv("CHAKRA_EMULATOR_STATE_DIR", str(tmp_path))
    yield f"et{os.getpid() % 100000}-"


@pytest.fixture
def veth_pair(system: None) -> Iterator[PairInfo]:
    """Two namespaces joined by a veth (emulator.engine.testbed.pair), removed afterwards."""
    bed = NetnsBed()
    try:
        yield pair(bed)
    finally:
        bed.close()


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ping_all_pairs(
    netns: dict[str, str], addresses: dict[str, str], timeout_s: float = 10.0
) -> set[tuple[str, str]]:
    """ICMP echo from every host to every other at once (raw sockets, one per namespace);
    returns the (src, dst) pairs that got a reply. Unanswered requests are resent every 0.5 s."""
    hosts = sorted(netns, key=lambda h: int(h[1:]))
    socks: dict[str, socket.socket] = {}
    for h in hosts:
        with in_netns(netns[h]):
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.setblocking(False)
        socks[h] = s
    index = {h: i for i, h in enumerate(hosts)}
    by_addr = {addresses[h]: h for h in hosts}
    pending = {(a, b) for a in hosts for b in hosts if a != b}
    answered: set[tuple[str, str]] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while pending and time.monotonic() < deadline:
            for a, b in pending:
                ident, seq = 0x4000 + index[a], index[b]
                head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
                payload = b"chakra-emulator ping"
                packet = struct.pack("!BBHHH", 8, 0, _checksum(head + payload), ident, seq)
                socks[a].sendto(packet + payload, (addresses[b], 0))
            resend_at = time.monotonic() + 0.5
            while pending and time.monotonic() < min(resend_at, deadline):
                ready, _, _ = select.select(list(socks.values()), [], [], 0.05)
                for s in ready:
                    while True:
                        try:
                            data, (src, _) = s.recvfrom(2048)
                        except BlockingIOError:
                            break
                        ihl = (data[0] & 0x0F) * 4
                        icmp_type, _, _, ident, _seq = struct.unpack("!BBHHH", data[ihl : ihl + 8])
                        if icmp_type != 0 or src not in by_addr:
                            continue
                        pair = (hosts[ident - 0x4000], by_addr[src]) if ident >= 0x4000 else None
                        if pair and pair in pending and socks[pair[0]] is s:
                            pending.discard(pair)
                            answered.add(pair)
    finally:
        for s in socks.values():
            s.close()
    return answered


def udp_socket(netns: str, tos: int = ECT0_TOS) -> socket.socket:
    with in_netns(netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    return s


@dataclass
class Receiver:
    """Counts UDP datagrams and CE marks (IP_RECVTOS) on a port in a namespace, in a thread."""

    netns: str
    port: int = 5000
    packets: int = 0
    ce: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Receiver:
        with in_netns(self.netns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # SO_RCVBUFFORCE (root) is not capped by net.core.rmem_max: no drops if the thread lags.
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
        self.sock.bind(("0.0.0.0", self.port))
        self.sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                _, anc, _, _ = self.sock.recvmsg(65535, socket.CMSG_SPACE(1))
            except TimeoutError:
                continue
            except OSError:
                return
            self.packets += 1
            for level, kind, data in anc:
                if level == socket.IPPROTO_IP and kind == socket.IP_TOS and data[0] & 3 == CE:
                    self.ce += 1

    def wait_for(self, packets: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.packets < packets and time.monotonic() < deadline:
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.sock.close()


def paced_send(
    flows: list[tuple[socket.socket, tuple[str, int]]],
    rate_bps: float,
    payload_bytes: int,
    duration_s: float,
) -> int:
    """Send from every socket at `rate_bps` each (UDP payload bits), for `duration_s`, releasing
    what each is owed every millisecond. Returns packets sent per socket."""
    payload = bytes(payload_bytes)
    per_packet_s = payload_bytes * 8 / rate_bps
    total = int(duration_s / per_packet_s)
    sent = 0
    start = time.perf_counter()
    while sent < total:
        owed = min(total, int((time.perf_counter() - start) / per_packet_s) + 1)
        while sent < owed:
            for sock, dst in flows:
                sock.sendto(payload, dst)
            sent += 1
        time.sleep(0.001)
    return sent
