"""AF_XDP for a rank's real NIC port (`engine.send_path: af_xdp`, opt-in): RoCEv2 sent and
received through XDP sockets, around the kernel's UDP stack and qdiscs.

One AfXdpPort per interface (in its network namespace, which may be the root one): a UMEM with an
XDP socket on each receive queue (copy mode, XDP_COPY, unless zero-copy is asked for and the
driver can), an XDP program that steers IPv4 UDP to port 4791 for the port's addresses into them
and passes everything else (ARP, ICMP, other traffic) to the kernel stack, and a token bucket in
front of the TX ring. The C side is emulator/native/xsk_*.c (module `_xsk`, built by
`python -m emulator.native.build`); this module adds the checks, the next-hop MACs, the ledger
record and the Python types.

- Transmit: `send(flow, tos, data, nbytes, segment_bytes, ip_id_first=0)` takes UDP payloads laid
  out back to back at a segment size (BTH .. ICRC, exactly what BurstWriter writes for a GSO
  send) and writes Ethernet + IPv4 + UDP headers in front of each; segment i gets IP id
  ip_id_first + i. The ICRC covers the IP id and total length (docs/architecture.md, "RoCEv2 on the wire"), and BurstWriter
  computes segment i's ICRC for IP id i (what the kernel gives GSO segments), so with the default
  ip_id_first=0 the bytes the engine already lays out are exact on the wire; no CRC is computed
  here. (RFC 6864 section 4.1: the id of an atomic datagram, DF set and not a fragment, carries
  no meaning, so repeating 0, 1, 2, ... per burst is legal, as it is for the kernel's GSO.)
- Rate cap: AF_XDP bypasses the qdisc where the DUT backend puts HTB, so the bucket enforces
  `rate_bps` (wire bits: frame, FCS, preamble, gap) with a depth of four frames (or 50 us at the
  cap when that is more); packets beyond it wait in the port's backlog (UMEM frames),
  `pump`/`drain` release them as tokens come; `send` returns how many segments it took.
- Receive: `receive(buf)` copies waiting payloads into buf as runs of one source and ToS (like a
  UDP_GRO read: all but the last of a run have one size), for `read_data_run` unchanged.
- Multi-buffer (XDP_USE_SG, Linux >= 6.6) when the path MTU's frames exceed a UMEM frame
  (4096-byte path MTU: 4170-byte frames against 3840 bytes of a 4096-byte chunk), or a refusal
  naming the limit.
- `check_interface` / `probe` say whether af_xdp can run on an interface, else raise
  AfXdpUnavailable with one line naming it and why.
- Clean-up: the program is attached with a BPF link, which the kernel detaches when the process
  dies, and recorded in the fabric's ledger (kind "xdp", by interface and program id) before it
  is attached, so `emulate clean` can check and release it; close() releases everything.

There is no pure-Python fallback: raw XDP sockets from Python are not the point. Where the
extension is missing or the interface cannot do it, the refusal line says why, and the UDP GSO
path stays the default.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from emulator.engine.af_xdp_setup import (
    MULTI_BUFFER_KERNEL,
    AfXdpUnavailable,
    attached_prog_id,
    frame_room,
    kernel_release,
    link_state,
    max_frame_bytes,
    max_udp_payload_bytes,
    multi_buffer_refusal,
    needs_multi_buffer,
    next_hop_mac,
    program_object,
    refuse,
    rx_queues_in_use,
)
from emulator.errors import EnvironmentProblem
from emulator.native import load
from emulator.netns import entered
from emulator.transport.packets import IPV4_HEADER_BYTES, ROCEV2_UDP_PORT, UDP_HEADER_BYTES

__all__ = [
    "AfXdpConfig",
    "AfXdpPort",
    "AfXdpUnavailable",
    "RxRun",
    "TokenBucket",
    "XdpFlow",
    "check_interface",
    "frame_room",
    "probe",
    "wire_bytes",
]

ETHERNET_WIRE_EXTRA_BYTES = 24  # FCS 4 + preamble/SFD 8 + inter-frame gap 12 (IEEE 802.3)
DEFAULT_BURST_S = 50e-6  # the bucket's default depth in time at the cap (see depth_bytes)
NS_PER_BYTE_TOKEN = 1_000_000_000  # the bucket counts tokens in 1e-9 bytes (xsk_frame.c)
_ERR_BYTES = 512
BIND_BUSY_RETRY_S = 2.0  # how long a just-released queue may stay claimed (see open)
_XDP_MODES = {"auto": 0, "native": 1, "generic": 2}
_ATTACH_MODES = {1: "native", 2: "generic", 3: "offloaded"}  # XDP_ATTACHED_* (linux/if_link.h)


def wire_bytes(frame_bytes: int) -> int:
    """What a frame (FCS excluded) costs on the link: padded to 60 bytes, + FCS, preamble, gap."""
    return max(frame_bytes, 60) + ETHERNET_WIRE_EXTRA_BYTES


@dataclass
class TokenBucket:
    """The bucket of xsk_frame.c in Python (the same integer arithmetic), for tests and for reasoning
    about a cap: RFC 2697 section 3's committed bucket (CIR = rate_bytes_per_s, CBS =
    depth_bytes), full at start, used as a shaper (a non-conforming packet waits). Time is an
    argument (the sans-I/O rule); a time earlier than the last refills nothing."""

    rate_bytes_per_s: int
    depth_bytes: int
    last_ns: int = 0
    tokens_nb: int = -1  # -1: full

    def __post_init__(self) -> None:
        if self.tokens_nb < 0:
            self.tokens_nb = self.depth_bytes * NS_PER_BYTE_TOKEN

    def _cost(self, nbytes: int) -> int:
        return min(nbytes * NS_PER_BYTE_TOKEN, self.depth_bytes * NS_PER_BYTE_TOKEN)

    def refill(self, now_ns: int) -> None:
        if now_ns <= self.last_ns:
            return
        full = self.depth_bytes * NS_PER_BYTE_TOKEN
        self.tokens_nb = min(full, self.tokens_nb + self.rate_bytes_per_s * (now_ns - self.last_ns))
        self.last_ns = now_ns

    def take(self, now_ns: int, nbytes: int) -> bool:
        if not self.rate_bytes_per_s:
            return True
        self.refill(now_ns)
        cost = self._cost(nbytes)
        if self.tokens_nb < cost:
            return False
        self.tokens_nb -= cost
        return True

    def ready_ns(self, nbytes: int) -> int:
        if not self.rate_bytes_per_s:
            return self.last_ns
        missing = self._cost(nbytes) - self.tokens_nb
        return self.last_ns + max(0, -(-missing // self.rate_bytes_per_s))


@dataclass(frozen=True)
class AfXdpConfig:
    """How a port is set up. `rate_bps`: the cap in wire bits/s (Ethernet framing included;
    None: no cap); `burst_bytes`: the bucket depth (None: see depth_bytes). Frames are UMEM
    chunks of `frame_bytes`; each receive queue owns rx_frames(queues) of them, the transmit
    side `tx_frames` (its backlog's capacity)."""

    path_mtu_bytes: int
    rate_bps: float | None = None
    burst_bytes: int | None = None
    zero_copy: bool = False
    xdp_mode: Literal["auto", "native", "generic"] = "auto"
    queues: int | None = None  # receive queues 0..queues-1 (None: all of the interface's)
    frame_bytes: int = 4096
    ring_size: int = 2048
    rx_frames_per_queue: int | None = None  # None: 2048, fewer per queue beyond 2 queues
    tx_frames: int = 4096

    def rx_frames(self, queues: int) -> int:
        """Receive frames per queue: the UMEM holds queues x this x frame_bytes, so a NIC with
        many queues gets fewer per queue (64 queues: 256 each, 64 MiB in all at 4 KiB)."""
        if self.rx_frames_per_queue is not None:
            return self.rx_frames_per_queue
        share = max(256, 4096 // max(queues, 1))
        return min(2048, 1 << (share.bit_length() - 1))

    def depth_bytes(self) -> int:
        """The bucket's depth: `burst_bytes`, else four of the largest frames or 50 us at the
        cap, whichever is more (a software pacer is not woken more often than every few tens
        of microseconds: a smaller depth would lose tokens, and rate, between wakeups); never
        less than one largest frame (RFC 2697: CBS at least the largest packet)."""
        largest = wire_bytes(max_frame_bytes(self.path_mtu_bytes))
        default = max(4 * largest, int((self.rate_bps or 0) / 8 * DEFAULT_BURST_S))
        return max(self.burst_bytes or default, largest)


class RxRun(NamedTuple):
    """Received payloads at buf[offset:offset + nbytes], `segments` of them, each `segment_bytes`
    long but the last: one source (address, UDP port), destination address and ToS byte. In
    the engine's terms: a GRO read of nbytes with gso_size segment_bytes from `source`."""

    source: tuple[str, int]
    dest: str
    tos: int
    offset: int
    nbytes: int
    segment_bytes: int
    segments: int


class Recorder(Protocol):
    """The part of fabrics.ownership.Ledger a port uses."""

    def record(self, items: Iterable[dict[str, Any]]) -> None: ...


@dataclass(frozen=True)
class XdpFlow:
    """A flow's addressing for `send`: a cffi `struct xsk_flow` and what it was made from."""

    src: str
    dst: str
    sport: int
    dst_mac: bytes
    ttl: int
    struct: Any


def _module(ifname: str, netns: str | None) -> Any:
    mod, why = load("xsk")
    if mod is None:
        raise refuse(ifname, netns, why)
    return mod


def check_interface(
    ifname: str, netns: str | None, addresses: Sequence[str], config: AfXdpConfig
) -> None:
    """What can be told without touching the interface: root, the extension, the interface
    (exists, up, Ethernet, holds the addresses, MTU, no other XDP program) and multi-buffer
    where the path MTU needs it. Raises AfXdpUnavailable (one line) when af_xdp cannot run."""
    for address in addresses:
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise refuse(ifname, netns, f"{address} is not IPv4 (RoCEv2 over IPv4 only)") from None
    if os.geteuid() != 0:
        raise refuse(ifname, netns, "needs root (CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW)")
    _module(ifname, netns)
    link = link_state(ifname, netns)
    if not link.ethernet:
        raise refuse(ifname, netns, "not an Ethernet interface (XDP frames start with Ethernet)")
    if not link.up:
        raise refuse(ifname, netns, "the interface is down")
    missing = [a for a in addresses if a not in link.addresses]
    if missing:
        raise refuse(ifname, netns, f"{', '.join(missing)} is not an address of the interface")
    ip_bytes = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + max_udp_payload_bytes(config.path_mtu_bytes)
    if link.mtu_bytes < ip_bytes:
        raise refuse(
            ifname,
            netns,
            f"MTU {link.mtu_bytes} is below the {ip_bytes}-byte packets of path MTU "
            f"{config.path_mtu_bytes}",
        )
    if link.xdp_prog_id:
        raise refuse(
            ifname,
            netns,
            f"another XDP program (id {link.xdp_prog_id}) is attached; af_xdp will not replace it",
        )
    if needs_multi_buffer(config.path_mtu_bytes, config.frame_bytes):
        if kernel_release() < MULTI_BUFFER_KERNEL:
            release = ".".join(map(str, kernel_release()))
            why = f"Linux {release} < 6.6"
            raise refuse(ifname, netns, multi_buffer_refusal(config.path_mtu_bytes, 4096, why))
        if config.zero_copy:
            # zero-copy multi-buffer depends on the driver (xdp_zc_max_segs); not offered here
            raise refuse(
                ifname,
                netns,
                multi_buffer_refusal(
                    config.path_mtu_bytes, config.frame_bytes, "not offered with zero-copy"
                ),
            )


def _reason(err: str, config: AfXdpConfig) -> str:
    """The C side's "step: error (libbpf's words)" as the refusal's reason."""
    step, _, what = err.partition(": ")
    if step.startswith("bind") and config.zero_copy and "not supported" in what:
        return "the driver has no zero-copy AF_XDP (XDP_ZEROCOPY refused); use copy mode"
    if (
        step.startswith("bind")
        and "Invalid argument" in what
        and (needs_multi_buffer(config.path_mtu_bytes, config.frame_bytes))
    ):
        return multi_buffer_refusal(
            config.path_mtu_bytes, config.frame_bytes, "the kernel refused XDP_USE_SG"
        )
    if "Operation not permitted" in what:
        return f"cannot {step}: not permitted (needs root: CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW)"
    if step.startswith("attach") and ("busy" in what or "exists" in what):
        return f"cannot {step}: another XDP program is attached"
    if step.startswith("bind") and "busy" in what:
        return f"cannot {step}: another AF_XDP socket holds that queue"
    if step.startswith("attach"):
        return f"the driver refuses the XDP program ({what})"
    return f"cannot {step}: {what}"


class AfXdpPort:
    """An open AF_XDP port on one interface; open with AfXdpPort.open, close with close() (or
    use it as a context manager). Not thread-safe: one worker owns it."""

    def __init__(self, ifname: str, netns: str | None, mod: Any, handle: Any, mac: bytes):
        self.ifname = ifname
        self.netns = netns
        self._mod = mod
        self._ffi = mod.ffi
        self._lib = mod.lib
        self._p = handle
        self.mac = mac
        info = self._ffi.new("struct xsk_info *")
        self._lib.xsk_port_info(handle, info)
        self.info: dict[str, Any] = {
            "interface": ifname,
            "netns": netns,
            "ifindex": info.ifindex,
            "queues": info.queues,
            "prog_id": info.prog_id,
            "prog_tag": bytes(self._ffi.buffer(info.prog_tag, 8)).hex(),
            "zero_copy": bool(info.zero_copy),
            "multi_buffer": bool(info.multi_buffer),
            "rx_frame_room_bytes": info.rx_frame_room,
            "tx_frame_room_bytes": info.tx_frame_room,
        }
        self.fds = tuple(self._lib.xsk_port_fd(handle, q) for q in range(info.queues))
        self._tx_buf: tuple[object, Any] | None = None
        self._rx_buf: tuple[object, Any] | None = None
        self._runs = self._ffi.new("struct xsk_rx_run[]", 256)
        self._names: dict[int, str] = {}

    @classmethod
    def open(
        cls,
        ifname: str,
        netns: str | None,
        addresses: Sequence[str],
        config: AfXdpConfig,
        *,
        ledger: Recorder | None = None,
    ) -> AfXdpPort:
        """Check, set up and attach; on any failure nothing stays behind and AfXdpUnavailable
        (one line) says why. `ledger` gets the XDP attachment before it is made."""
        check_interface(ifname, netns, addresses, config)
        mod = _module(ifname, netns)
        ffi, lib = mod.ffi, mod.lib
        link = link_state(ifname, netns)
        try:
            obj = program_object()
        except EnvironmentProblem as e:
            raise refuse(ifname, netns, str(e)) from None
        queues = config.queues or rx_queues_in_use(ifname, netns)
        addrs = ffi.new("uint32_t[]", [_be32(a) for a in addresses])
        name, path = ffi.new("char[]", ifname.encode()), ffi.new("char[]", str(obj).encode())
        cfg = ffi.new(
            "struct xsk_config *",
            {
                "ifname": name,
                "bpf_object": path,
                "queues": queues,
                "frame_bytes": config.frame_bytes,
                "ring_size": config.ring_size,
                "rx_frames_per_queue": config.rx_frames(queues),
                "tx_frames": config.tx_frames,
                "max_frame_bytes": max_frame_bytes(config.path_mtu_bytes),
                "zero_copy": int(config.zero_copy),
                "xdp_mode": _XDP_MODES[config.xdp_mode],
                "rate_bytes_per_s": int((config.rate_bps or 0) // 8),
                "burst_bytes": config.depth_bytes(),
                "local_addrs_be": addrs,
                "n_local_addrs": len(addresses),
            },
        )
        out = ffi.new("struct xsk_port **")
        err = ffi.new("char[]", _ERR_BYTES)
        # A queue whose last XDP socket just closed stays claimed until the kernel's deferred
        # release of its buffer pool (net/xdp/xsk_buff_pool.c): bind says EBUSY meanwhile, so
        # a port opened right after another closed (probe, then open) retries for a moment.
        deadline = time.monotonic() + BIND_BUSY_RETRY_S
        while True:
            with entered(netns):
                opened = lib.xsk_port_open(out, cfg, err, _ERR_BYTES) >= 0
            text = "" if opened else ffi.string(err).decode()
            busy = text.startswith("bind") and "busy" in text
            if opened or not busy or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if not opened:
            raise refuse(ifname, netns, _reason(text, config))
        port = cls(ifname, netns, mod, out[0], link.mac)
        try:
            if ledger is not None:
                ledger.record([port.ledger_record()])
            with entered(netns):
                if lib.xsk_port_attach(out[0], err, _ERR_BYTES) < 0:
                    raise refuse(ifname, netns, _reason(ffi.string(err).decode(), config))
            info = ffi.new("struct xsk_info *")
            lib.xsk_port_info(out[0], info)
            port.info["link_id"] = info.link_id
            port.info["xdp_mode"] = _ATTACH_MODES.get(info.attach_mode, "unknown")
            port.info["rate_bps"] = config.rate_bps
            port.info["burst_bytes"] = config.depth_bytes()
        except BaseException:
            port.close()
            raise
        return port

    def ledger_record(self) -> dict[str, Any]:
        """The ledger entry of this port's XDP attachment (fabrics/ownership.py kind "xdp")."""
        return {
            "kind": "xdp",
            "netns": self.netns,
            "dev": self.ifname,
            "ifindex": self.info["ifindex"],
            "id": self.info["prog_id"],
            "tag": self.info["prog_tag"],
        }

    @property
    def handle(self) -> Any:
        """The C port (`struct xsk_port *`), for a drain of several ports (xdp_ports.PortGroup)."""
        return self._p

    @property
    def module(self) -> Any:
        return self._mod

    # --- transmit ---------------------------------------------------------------------------

    def flow(
        self, src: str, dst: str, sport: int, *, ttl: int = 64, dst_mac: bytes | None = None
    ) -> XdpFlow:
        """A flow from src:sport to dst:4791 with its next hop's MAC (refused in one line when
        the neighbour does not resolve; `dst_mac`: already resolved for this src and dst)."""
        mac = dst_mac or next_hop_mac(self.ifname, self.netns, src, dst)
        s = self._ffi.new(
            "struct xsk_flow *",
            {
                "dst_mac": list(mac),
                "src_mac": list(self.mac),
                "src_ip_be": _be32(src),
                "dst_ip_be": _be32(dst),
                "sport": sport,
                "dport": ROCEV2_UDP_PORT,
                "ttl": ttl,
            },
        )
        return XdpFlow(src, dst, sport, mac, ttl, s)

    def _cdata(self, data: Any, cached: tuple[object, Any] | None) -> tuple[object, Any]:
        if cached is not None and cached[0] is data:
            return cached
        return data, self._ffi.from_buffer(data)

    def send(
        self,
        flow: XdpFlow,
        tos: int,
        data: bytearray | memoryview | bytes,
        nbytes: int,
        segment_bytes: int,
        ip_id_first: int = 0,
        now_ns: int = 0,
        *,
        ahead: bool = False,
    ) -> int:
        """Queue the segments of data[:nbytes] (cut every segment_bytes), segment i with IP id
        ip_id_first + i, and send what the bucket allows; returns the segments taken. Fewer
        than all when the backlog is full: hand the rest again later with ip_id_first advanced
        by the number taken, so each keeps the IP id its ICRC was computed for. `ahead`: in
        front of the packets already waiting (a receiver's ACKs and CNPs, which a NIC does not
        hold behind its own data; they still take their tokens). Raises OSError(ENETDOWN) when
        the link is down (the backlog is dropped, counted)."""
        self._tx_buf = self._cdata(data, self._tx_buf)
        n = self._lib.xsk_port_send(
            self._p,
            flow.struct,
            tos,
            self._tx_buf[1],
            nbytes,
            segment_bytes,
            ip_id_first,
            now_ns,
            int(ahead),
        )
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return int(n)

    def pump(self, now_ns: int = 0) -> int:
        """Release what the bucket allows now; returns the packets still waiting."""
        n = self._lib.xsk_port_pump(self._p, now_ns)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return int(n)

    def drain(self, timeout_s: float, *, stop_on_rx: bool = False) -> int:
        """Send the backlog at the capped rate, waiting for tokens (asleep for long waits,
        spinning for short ones), for at most timeout_s; with stop_on_rx, return as soon as a
        packet was received too (read it, then drain again). Returns what is left."""
        deadline = self._lib.xsk_now_ns() + int(timeout_s * 1e9)
        n = self._lib.xsk_port_drain(self._p, deadline, int(stop_on_rx))
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        return int(n)

    def next_release_ns(self) -> int:
        """CLOCK_MONOTONIC (time.monotonic_ns) time at which the next waiting packet has its
        tokens; 0 when nothing waits for tokens."""
        return int(self._lib.xsk_port_next_release_ns(self._p))

    @property
    def backlog(self) -> int:
        """Packets waiting for tokens, plus 1 while the TX ring holds descriptors the kernel
        has not taken yet (0: everything handed over)."""
        return int(self._lib.xsk_port_backlog(self._p))

    # --- receive ----------------------------------------------------------------------------

    def _name(self, be: int) -> str:
        name = self._names.get(be)
        if name is None:
            if len(self._names) > 4096:
                self._names.clear()
            name = self._names[be] = str(ipaddress.IPv4Address(be.to_bytes(4, sys.byteorder)))
        return name

    def receive(self, buf: bytearray, max_run_segments: int = 64) -> list[RxRun]:
        """The payloads waiting on the RX rings, copied into buf back to back as runs."""
        self._rx_buf = self._cdata(buf, self._rx_buf)
        n = self._lib.xsk_port_recv(
            self._p, self._rx_buf[1], len(buf), self._runs, 256, max_run_segments
        )
        name = self._name
        return [
            RxRun(
                (name(r.src_ip_be), r.sport),
                name(r.dst_ip_be),
                r.tos,
                r.offset,
                r.nbytes,
                r.segment_bytes,
                r.count,
            )
            for r in self._runs[0:n]
        ]

    # --- counters and life ------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """The port's counters (xsk_api.h says what each is) with the sockets' XDP_STATISTICS
        and the XDP program's: `redirected`, `non_roce_passed` (ARP, ICMP, anything not ours,
        to the kernel), `no_socket_passed`."""
        c = self._ffi.new("struct xsk_counters *")
        k = self._ffi.new("struct xsk_kernel_stats *")
        self._lib.xsk_port_counters(self._p, c)
        rc = self._lib.xsk_port_kernel_stats(self._p, k)
        if rc < 0:
            raise OSError(-rc, os.strerror(-rc))
        out = {f: int(getattr(c, f)) for f, _ in self._ffi.typeof("struct xsk_counters").fields}
        for f, _ in self._ffi.typeof("struct xsk_kernel_stats").fields:
            key = {
                "prog_redirected": "redirected",
                "prog_passed": "non_roce_passed",
                "prog_no_socket": "no_socket_passed",
            }.get(f, f)
            out[key] = int(getattr(k, f))
        return out

    def close(self) -> None:
        """Detach the program, close the sockets, free the UMEM (idempotent)."""
        if self._p is not None:
            self._lib.xsk_port_close(self._p)
            self._p = None

    def __enter__(self) -> AfXdpPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # the last resort for a port dropped without close() (an exception between open and
        # the caller's with-block): the kernel objects die with their descriptors anyway
        if getattr(self, "_p", None) is not None:
            self.close()


def probe(
    ifname: str, netns: str | None, addresses: Sequence[str], config: AfXdpConfig
) -> dict[str, Any]:
    """Open and close a port: the start-up detection that also asks the driver (modes,
    multi-buffer, zero-copy). Returns the port's info; raises AfXdpUnavailable (one line)."""
    with AfXdpPort.open(ifname, netns, addresses, config) as port:
        info = dict(port.info)
    deadline = time.monotonic() + 2.0
    while attached_prog_id(ifname, netns) == info["prog_id"] and time.monotonic() < deadline:
        time.sleep(0.01)  # the link's release is synchronous; this only bounds a surprise
    return info


def _be32(address: str) -> int:
    """An IPv4 address as the uint32 whose memory holds it in network order (the C side
    memcpy's it into the header)."""
    return int.from_bytes(ipaddress.IPv4Address(address).packed, sys.byteorder)
