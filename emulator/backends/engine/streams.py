"""The scenario's streams on the engine's backends (emulated fabric, switch under test): one
thread sends every stream's datagrams from UDP sockets in the sending ranks' namespaces, one
thread reads them from sockets in the receiving ranks' namespaces. The schedule, signature and
counting are the transport's (emulator.transport.stream); times are target times, wall =
start + t x tdf.

The receiving sockets ask the kernel for the ToS byte of each datagram (IP_RECVTOS: the ECN
field the fabric left) and for the count of datagrams it dropped because the socket's buffer was
full (SO_RXQ_OVFL): those are this machine's losses, not the fabric's, and say so.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

from emulator.errors import EnvironmentProblem
from emulator.traffic.streams import StreamSpec
from emulator.transport.stream import STAMP_BYTES, StreamSink, StreamSource
from fabrics.iproute import in_netns

IP_RECVTOS = 13
IP_TOS = 1
IP_MTU_DISCOVER = 10
IP_PMTUDISC_DO = 2
SO_RXQ_OVFL = 40  # include/uapi/asm-generic/socket.h
SO_RCVBUFFORCE = 33
_U32 = struct.Struct("=I")
_ANCILLARY = socket.CMSG_SPACE(4) * 2
BUFFER_BYTES = 8 << 20
MAX_BURST = 256  # datagrams one pass sends of one stream before it looks at the others


def _socket(netns: str | None) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with in_netns(netns):
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


class StreamRunner:
    """Sends and counts the scenario's streams during the replay; `close` releases the
    sockets (the run's stack calls it whatever happens)."""

    def __init__(
        self,
        specs: tuple[StreamSpec, ...],
        sources: list[StreamSource],
        sinks: dict[int, StreamSink],
        *,
        address_of: Callable[[int], str],
        netns_of: Callable[[int], str | None],
        tdf: float,
    ) -> None:
        self.sources = sources
        self.sinks = sinks
        self.tdf = tdf
        self.errors: list[str] = []
        # receiving socket -> (its rank, datagrams the kernel dropped at it: buffer full)
        self._drops: dict[int, tuple[int, int]] = {}
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._start_wall_s = 0.0
        try:
            # sending: per stream, one socket per UDP source port, ToS set (DSCP and ECN)
            self._send: list[
                tuple[StreamSource, dict[int, socket.socket], tuple[str, int], bytes]
            ] = []
            for spec, source in zip(specs, sources, strict=True):
                by_port = {}
                for sport in dict.fromkeys(source.sports):
                    sock = self._own(_socket(netns_of(spec.src)))
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.setsockopt(socket.IPPROTO_IP, IP_TOS, (spec.dscp << 2) | spec.ecn)
                    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
                    self._bind(sock, address_of(spec.src), sport, spec.src)
                    by_port[sport] = sock
                pad = bytes(source.payload_bytes - STAMP_BYTES)
                dest = (address_of(spec.dst), spec.udp_dport)
                self._send.append((source, by_port, dest, pad))
            # receiving: one socket per (rank, destination port)
            self._selector = selectors.DefaultSelector()
            bound: set[tuple[int, int]] = set()
            for spec in specs:
                if (spec.dst, spec.udp_dport) in bound:
                    continue
                bound.add((spec.dst, spec.udp_dport))
                sock = self._own(_socket(netns_of(spec.dst)))
                sock.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
                sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
                with contextlib.suppress(PermissionError):
                    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUFFER_BYTES)
                self._bind(sock, address_of(spec.dst), spec.udp_dport, spec.dst)
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ, spec.dst)
                self._drops[sock.fileno()] = (spec.dst, 0)
        except BaseException:
            self.close()
            raise

    def _own(self, sock: socket.socket) -> socket.socket:
        self._socks.append(sock)
        return sock

    def _bind(self, sock: socket.socket, address: str, port: int, rank: int) -> None:
        try:
            sock.bind((address, port))
        except OSError as exc:
            raise EnvironmentProblem(
                f"streams: cannot bind UDP {address}:{port} at rank {rank}: {exc.strerror}"
            ) from None

    @property
    def socket_drops(self) -> dict[int, int]:
        """Datagrams each receiving rank's sockets dropped (their buffer was full)."""
        out: dict[int, int] = {}
        for rank, n in self._drops.values():
            out[rank] = out.get(rank, 0) + n
        return {r: n for r, n in out.items() if n}

    def now_s(self) -> float:
        return (time.perf_counter() - self._start_wall_s) / self.tdf

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, start_wall_s: float) -> None:
        self._start_wall_s = start_wall_s
        for target, name in ((self._send_loop, "streams-tx"), (self._receive_loop, "streams-rx")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stops both threads; the receiver reads what is already queued first."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._threads.clear()

    def close(self) -> None:
        self.stop()
        selector = getattr(self, "_selector", None)
        if selector is not None:
            selector.close()
        for sock in self._socks:
            sock.close()
        self._socks.clear()

    # -- threads ---------------------------------------------------------------------------
    def _send_loop(self) -> None:
        try:
            while not self._stop.is_set():
                now = self.now_s()
                earliest = None
                for source, socks, dest, pad in self._send:
                    for sport, head in source.poll(now, limit=MAX_BURST):
                        self._sendto(socks[sport], head + pad, dest)
                    due = source.next_due_s()
                    if due is not None and (earliest is None or due < earliest):
                        earliest = due
                if earliest is None:
                    return  # every stream sent in full
                wait_s = (earliest - self.now_s()) * self.tdf
                if wait_s > 0:
                    self._stop.wait(min(wait_s, 0.05))
        except Exception as exc:  # the run reports it; the replay goes on
            self.errors.append(f"sending: {exc}")

    def _sendto(self, sock: socket.socket, data: bytes, dest: tuple[str, int]) -> None:
        try:
            sock.sendto(data, dest)
        except OSError as exc:
            if exc.errno not in (errno.ENOBUFS, errno.EAGAIN):
                raise
            # the host's queue was full: the frame is lost at the sender, as a NIC drops it
            if len(self.errors) < 5:
                self.errors.append(f"sending: {exc.strerror} (frame not sent)")

    def _receive_loop(self) -> None:
        try:
            while True:
                stopping = self._stop.is_set()
                for key, _ in self._selector.select(timeout=0 if stopping else 0.05):
                    self._drain(key.fileobj, key.data)  # type: ignore[arg-type]
                if stopping:
                    return
        except Exception as exc:
            self.errors.append(f"receiving: {exc}")

    def _drain(self, sock: socket.socket, rank: int) -> None:
        sink = self.sinks[rank]
        for _ in range(4096):
            try:
                data, ancillary, _flags, _addr = sock.recvmsg(65536, _ANCILLARY)
            except BlockingIOError:
                return
            tos = 0
            for level, kind, value in ancillary:
                if level == socket.IPPROTO_IP and kind == IP_TOS and value:
                    tos = value[0]
                elif level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL and len(value) >= 4:
                    self._drops[sock.fileno()] = (rank, _U32.unpack_from(value)[0])
            sink.on_datagram(self.now_s(), data, tos & 3)
