"""The receive queue pairs' common path in C (emulator/native/burst_drain.c, drain.py) against the
Python receive path: the same reads over loopback, read once by a worker's receive path with the
drain and once without, leave the same receiver state, events, counters, per-class tallies,
waits counted and ACK/NAK/CNP bytes on the wire, packet for packet (in order data, message ends,
AckReq, CE marks, gaps and duplicates, GSO batches read as one GRO read, a stranger's packets,
a queue pair nobody opened)."""

from __future__ import annotations

import contextlib
import errno
import random
import select
import socket
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.engine.active import ActiveQueuePairs
from emulator.engine.native_path import choose_data_path
from emulator.engine.params import EngineParams
from emulator.engine.plan import RankEndpoint
from emulator.engine.ranks import RECV_BUFFER_BYTES, RankSockets
from emulator.engine.receive_path import (
    NATIVE_READS_PER_WAKEUP,
    READS_PER_WAKEUP,
    ReceivePath,
)
from emulator.engine.send_errors import SendFailures
from emulator.engine.send_path import SendPath
from emulator.engine.sockets import Offloads, gso_cmsg, tos_cmsg
from emulator.latency import BOUNDS_S, BUCKETS, LatencyHistogram
from emulator.native import load
from emulator.native.drain import ReceiveDrain
from emulator.transport.burst_wire import BurstBuffer
from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES, IPV4_FRAME_OVERHEAD_BYTES
from emulator.transport.wire import FlowAddress, IcrcContext, encode, layout_gso

MODULE, WHY_NOT = load("burst")
pytestmark = pytest.mark.skipif(MODULE is None, reason=f"native path absent: {WHY_NOT}")

PAYLOAD = 1024
TOS_DATA, TOS_ACK, TOS_CNP = 26 << 2 | 2, 48 << 2, 48 << 2  # data ECT(0)
TOS_DATA_2 = 10 << 2 | 2  # a second data class
CE = 3
SPORTS = (49152, 49153, 49154)  # the peer's queue pairs' source ports; the last one no QP's


def _addresses(seed: int) -> tuple[str, str]:
    r = random.Random(seed)
    a, b = r.randrange(1, 250), r.randrange(1, 250)
    return f"127.{a}.{b}.11", f"127.{a}.{b}.22"


class _Peer:
    """The sending side: a socket per source port at the peer's address, and the peer's port
    4791, where the receiver's ACKs, NAKs and CNPs arrive."""

    def __init__(self, peer: str, receiver: str) -> None:
        self.receiver = receiver
        self.capture = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.capture.bind((peer, 4791))
        self.capture.setblocking(False)
        self.socks = {}
        self.icrc = {}
        for sport in SPORTS:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((peer, sport))
            self.socks[sport] = s
            self.icrc[sport] = IcrcContext(FlowAddress(peer, receiver, sport))

    def send(self, sport: int, packets: list[DataPacket], tos: int) -> None:
        """The packets as one datagram, or one GSO send (read as one GRO read)."""
        icrc = self.icrc[sport]
        if len(packets) == 1:
            data, cmsgs = encode(packets[0], icrc, 0), [tos_cmsg(tos)]
        else:
            out = bytearray(65535)
            used, segment = layout_gso(out, packets, icrc, ip_id_first=0)
            data, cmsgs = bytes(out[:used]), [gso_cmsg(segment), tos_cmsg(tos)]
        self.socks[sport].sendmsg([data], cmsgs, 0, (self.receiver, 4791))

    def replies(self) -> list[bytes]:
        got = []
        while select.select([self.capture], [], [], 0.02)[0]:
            got.append(self.capture.recv(65535))
        return got

    def close(self) -> None:
        self.capture.close()
        for s in self.socks.values():
            s.close()


def _script(seed: int) -> list[list[tuple[int, list[DataPacket], int]]]:
    """Batches of sends (source port, packets, ToS), each batch read before the next: two queue
    pairs' messages of 1-30 packets in runs of 1-6, AckReq on some, CE on some, now and then a
    packet lost (a gap, then NAKs), a run sent again (duplicates), a stranger's packet (a port
    no queue pair has) and a queue pair nobody opened."""
    r = random.Random(seed)
    state = {sport: [0, 0, 0] for sport in SPORTS[:2]}  # next PSN, packets left in message, size
    batches = []
    for _ in range(40):
        batch = []
        for _ in range(r.randint(1, 4)):
            sport = r.choice(SPORTS[:2])
            qpn = SPORTS.index(sport) + 1
            before = list(state[sport])
            psn, left, size = before
            run = []
            for _ in range(r.randint(1, 6)):
                if left == 0:
                    size = left = r.randint(1, 30)
                first, last = left == size, left == 1
                opcode = (
                    Opcode.SEND_ONLY
                    if first and last
                    else Opcode.SEND_FIRST
                    if first
                    else Opcode.SEND_LAST
                    if last
                    else Opcode.SEND_MIDDLE
                )
                n = r.choice((PAYLOAD, 100)) if last else PAYLOAD
                run.append(DataPacket(qpn, psn, opcode, r.random() < 0.3, n))
                psn, left = psn + 1, left - 1
                if last:
                    break  # a GSO send's segments but the last are one size
            state[sport] = [psn, left, size]
            # CE-marked (Python's), or in one of two data classes (one drain call takes both)
            tos = TOS_DATA | CE if r.random() < 0.1 else r.choice((TOS_DATA, TOS_DATA_2))
            event = r.random()
            if event < 0.08 and len(run) > 1:
                # the first is lost (a gap: the rest dropped, a NAK); the sender goes back to it
                batch.append((sport, run[1:], tos))
                state[sport] = before
            elif event < 0.14:
                batch += [(sport, run, tos), (sport, run, tos)]  # sent twice: duplicates
            else:
                batch.append((sport, run, tos))
        if r.random() < 0.05:
            batch.append((SPORTS[2], [DataPacket(1, 0, Opcode.SEND_ONLY, True, PAYLOAD)], TOS_DATA))
        if r.random() < 0.05:
            batch.append((SPORTS[0], [DataPacket(9, 0, Opcode.SEND_ONLY, True, PAYLOAD)], TOS_DATA))
        batches.append(batch)
    return batches


@contextlib.contextmanager
def _receive_side(seed: int, drain_on: bool) -> Iterator[SimpleNamespace]:
    """One rank (1) on the native data path, its receive path with the drain or without, and a
    peer (rank 0's address) that sends it raw datagrams; two receive queue pairs opened ahead
    (QP 1 and 2 from SPORTS). Yields what the tests read: path, rank, peer, drain, recv_conns,
    events, counters, per-class tallies, the wait histogram, the clock (`now[0]`) and the
    times after_reads was called (`after`)."""
    peer_address, rank_address = _addresses(seed)
    params = EngineParams(native="on", native_drain=drain_on)
    events: list[Any] = []
    counters: Counter[str] = Counter()
    classes: Counter[tuple[int, bool]] = Counter()
    histogram = LatencyHistogram()
    offloads = Offloads(gso=True, gro=True)

    def tally(tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
        classes[(tos >> 2, sent)] += packets
        classes[(tos >> 2, sent, "bytes")] += udp_bytes  # type: ignore[index]

    spec = RankEndpoint(1, rank_address, None, 400e9)
    sockets = RankSockets(
        [spec],
        [peer_address],
        params,
        4096,
        offloads,
        events,
        TOS_DATA,
        None,  # type: ignore[arg-type]
    )
    peer = _Peer(peer_address, rank_address)
    try:
        buf, reply = bytearray(RECV_BUFFER_BYTES), bytearray(RECV_BUFFER_BYTES)
        gso_buf = BurstBuffer(max(RECV_BUFFER_BYTES, 4 * GSO_MAX_BUFFER_BYTES))
        data_path = choose_data_path("on", gso_buf, buf, reply, 64)
        assert data_path.reader is not None
        failures = SendFailures(counters, 4096)
        recv_conns: dict[int, Any] = {}
        send = SendPath(
            params,
            offloads,
            counters,
            tally,
            failures,
            SimpleNamespace(budget=None, send_burst=None, send_replies=None),  # type: ignore[arg-type]
            data_path,
            gso_buf,
            reply,
            ActiveQueuePairs(),
            recv_conns,
            tos_ack=TOS_ACK,
            tos_cnp=TOS_CNP,
            max_packet_wire_bytes=4096 + 16 + IPV4_FRAME_OVERHEAD_BYTES,
        )
        drain = (
            ReceiveDrain(data_path.reader, reply, gso=True, max_segments=64) if drain_on else None
        )
        now = [0.0]
        after: list[float] = []
        path = ReceivePath(
            TransportParams(),
            SimpleNamespace(now=lambda: now[0]),  # type: ignore[arg-type]
            events,
            counters,
            frozenset({peer_address}),
            recv_conns,
            buf,
            data_path.reader,
            tally,
            lambda *a: None,
            send.send_replies,
            sockets.sport_socket,
            lambda now, rank: after.append(now),
            receive_wait=histogram,
            latency=False,
            drain=drain,
            tos_ack=TOS_ACK,
            send_failed=failures.failed,
        )
        rank = sockets.ranks[1]
        path.open_ahead(
            sockets.ranks,
            {0: peer_address, 1: rank_address},
            [(qpn - 1, 0, 1, qpn, sport, 0) for qpn, sport in ((1, SPORTS[0]), (2, SPORTS[1]))],
        )
        yield SimpleNamespace(
            path=path,
            rank=rank,
            peer=peer,
            drain=drain,
            recv_conns=recv_conns,
            events=events,
            counters=counters,
            classes=classes,
            histogram=histogram,
            now=now,
            after=after,
        )
    finally:
        peer.close()
        sockets.close()


def _replay(seed: int, drain_on: bool) -> dict[str, Any]:
    with _receive_side(seed, drain_on) as side:
        rank, path, now = side.rank, side.path, side.now
        rx = rank.rx_sock
        assert rx is not None
        wire = []
        for batch in _script(seed):
            for sport, packets, tos in batch:
                side.peer.send(sport, packets, tos)
            assert select.select([rx], [], [], 5)[0]
            while select.select([rx], [], [], 0)[0]:
                path.on_readable(rank)
            now[0] += 1e-6
            wire += side.peer.replies()
        # what C counted is folded in at the report; a second fold adds nothing
        path.collect()
        path.collect()
        receivers = {
            qpn: {
                k: v
                for k, v in vars(c.qp).items()
                if k not in ("events", "notification_point", "on_recording")
            }
            | {"np": vars(c.qp.notification_point)}
            for qpn, c in side.recv_conns.items()
        }
        counters = side.counters
        return {
            "receivers": receivers,
            "events": [repr(e) for e in side.events],
            # the drain counts what it took (reads_taken_in_c): the rest is the same
            "counters": {k: v for k, v in counters.items() if k != "reads_taken_in_c"},
            "taken": counters["reads_taken_in_c"],
            "classes": dict(side.classes),
            "drops": dict(rank.endpoint.drops),
            "waits": side.histogram.count,
            "wire": wire,
        }


@pytest.mark.parametrize("seed", range(6))
def test_the_drain_leaves_what_the_python_receive_path_leaves(seed: int) -> None:
    python = _replay(seed, drain_on=False)
    native = _replay(seed, drain_on=True)
    assert native["taken"] > 0  # C took reads
    assert python["taken"] == 0
    for key in ("receivers", "events", "counters", "classes", "drops", "waits", "wire"):
        assert native[key] == python[key], key
    # the script reached what it is about: message ends, CE, ACKs and a gap's NAK
    kinds = {e.split("(")[0] for e in python["events"]}
    assert {"MessageReceived", "CnpSent"} <= kinds
    assert python["wire"]


@pytest.mark.parametrize("drain_on", [False, True])
def test_a_wakeup_reads_up_to_its_budget_of_reads_made_in_c(drain_on: bool) -> None:
    """On the native path a readable socket is read up to NATIVE_READS_PER_WAKEUP times in one
    callback (then what they produced, once): a worker behind in an All-to-All found 64 too
    few, and the reads left behind waited a whole round of the loop more. What is left waits
    for the next wakeup."""
    assert NATIVE_READS_PER_WAKEUP > READS_PER_WAKEUP  # more than the Python path's reads
    queued = NATIVE_READS_PER_WAKEUP + 40
    with _receive_side(7, drain_on) as side:
        rank, path = side.rank, side.path
        rx = rank.rx_sock
        assert rx is not None
        side.peer.send(SPORTS[0], [DataPacket(1, 0, Opcode.SEND_FIRST, False, PAYLOAD)], TOS_DATA)
        for psn in range(1, queued):
            packet = DataPacket(1, psn, Opcode.SEND_MIDDLE, False, PAYLOAD)
            side.peer.send(SPORTS[0], [packet], TOS_DATA)
        # loopback delivers within the send: every datagram is in the socket now
        assert select.select([rx], [], [], 5)[0]
        path.on_readable(rank)
        assert len(side.after) == 1
        path.collect()
        assert side.counters["packets_received"] == NATIVE_READS_PER_WAKEUP
        path.on_readable(rank)
        assert len(side.after) == 2
        path.collect()
        assert side.counters["packets_received"] == queued
        assert not select.select([rx], [], [], 0)[0]


def test_an_ack_send_the_kernel_refuses_is_raised_naming_its_peer() -> None:
    """A read C takes whose ACK the kernel refuses for a reason a congested or dead wire does
    not explain (here a closed socket: EBADF) is still taken (the state moved, as the Python
    path's send of it fails after the receiver answered), and the receive path raises it
    through SendFailures with the queue pair's peer; nothing is lost silently."""
    with _receive_side(99, drain_on=True) as side:
        conn = side.recv_conns[1]
        conn.sock.close()  # its ACKs' socket: every send from it fails with EBADF
        packets = [DataPacket(1, 0, Opcode.SEND_FIRST, False, PAYLOAD)]
        packets.append(DataPacket(1, 1, Opcode.SEND_MIDDLE, True, PAYLOAD))
        side.peer.send(SPORTS[0], packets, TOS_DATA)
        assert select.select([side.rank.rx_sock], [], [], 5)[0]
        with pytest.raises(OSError) as refused:
            side.path.on_readable(side.rank)
        assert refused.value.errno == errno.EBADF
        assert side.drain.d.send_errno_qpn == 1
        side.path.collect()  # what C took, folded in as at the worker's report
        assert conn.qp.common_path()[0] == 2 and conn.qp.acks_sent == 1  # taken all the same
        assert side.counters["reads_taken_in_c"] == 1


def test_the_drains_wait_histogram_buckets_as_latency_histogram_observe() -> None:
    """The waits C counts until the report land in the bucket LatencyHistogram.observe puts
    them in (bisect_left over its bounds: a wait equal to a bound is in that bound's bucket),
    with the same sum and maximum: the bounds themselves, values a hair either side, 0, and
    beyond the last bound."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    d = ffi.gc(lib.drain_new(), lib.drain_free)
    d.wait_bounds = BOUNDS_S.tolist()
    values = [0.0, 1e-9, float(BOUNDS_S[-1]) * 10]
    for bound in BOUNDS_S.tolist()[::7]:
        values += [bound, bound * (1 - 1e-12), bound * (1 + 1e-12)]
    python = LatencyHistogram()
    for value in values:
        lib.drain_observe_wait(d, value)
        python.observe(value)
    t = d.totals
    assert ffi.unpack(t.wait_counts, BUCKETS) == python.counts
    assert t.wait_max_s == python.max_s
    assert t.wait_sum_s == pytest.approx(python.sum_s, rel=1e-12)


def test_what_c_took_is_folded_in_before_python_reads_or_writes_the_receiver() -> None:
    """C keeps what it took in its slot until Python needs the receiver: a write of Python's
    state to C (here through on_recording) folds it in first, so neither side loses the packets
    (a write of the receiver's stale state would have taken C back to PSN 0); the report's
    collect folds the rest."""
    with _receive_side(5, drain_on=True) as side:
        packets = [DataPacket(1, 0, Opcode.SEND_FIRST, False, PAYLOAD)]
        packets += [DataPacket(1, psn, Opcode.SEND_MIDDLE, False, PAYLOAD) for psn in (1, 2)]
        side.peer.send(SPORTS[0], packets, TOS_DATA)
        rx = side.rank.rx_sock
        assert select.select([rx], [], [], 5)[0]
        while select.select([rx], [], [], 0)[0]:
            side.path.on_readable(side.rank)
        qp = side.recv_conns[1].qp
        slot = side.drain.d.q[1]
        assert slot.packets == 3 and slot.expected_psn == 3  # in C, not folded yet
        assert qp.packets_received == 0
        qp.deliveries = None  # on_recording: Python's state written to C
        assert qp.packets_received == 3 and qp.common_path()[0] == 3
        assert slot.packets == 0 and slot.expected_psn == 3
        # more for it, then the message's last packet: Python folds before it takes it
        more = [DataPacket(1, 3, Opcode.SEND_MIDDLE, False, PAYLOAD)]
        more.append(DataPacket(1, 4, Opcode.SEND_LAST, True, PAYLOAD))
        side.peer.send(SPORTS[0], more, TOS_DATA)
        assert select.select([rx], [], [], 5)[0]
        while select.select([rx], [], [], 0)[0]:
            side.path.on_readable(side.rank)
        assert qp.packets_received == 5 and qp.common_path()[0] == 5
        assert [type(e).__name__ for e in side.events] == ["MessageReceived"]
        assert side.events[0].size_bytes == 5 * PAYLOAD
        side.path.collect()
        assert side.counters["packets_received"] == 5
