"""The native burst path (emulator/native/burst.c): built where it can be, the same bytes as the
Python BurstWriter for every burst shape, valid RoCEv2 for scapy, a send that reports the
kernel's errors as -errno, a read and its control messages as Python reads them, a GRO read
parsed as read_data_run parses it, and ACKs with the codec's bytes.

Without the extension these tests skip with the reason, except `test_extension_is_built`, which
fails wherever a C compiler is present (CI runs ./setup.sh, which builds it).
"""

from __future__ import annotations

import contextlib
import errno
import select
import shutil
import socket
from types import ModuleType, SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from emulator.engine.sockets import (
    ANCILLARY_BYTES,
    IP_RECVTOS,
    SO_TIMESTAMPNS,
    SOL_UDP,
    UDP_GRO,
    gso_cmsg,
    read_ancillary,
    tos_cmsg,
)
from emulator.native import HERE, built_path, load, module_names, stale
from emulator.native.acks import NativeReplies
from emulator.native.burst import NativeBursts
from emulator.native.reads import NativeRunReader
from emulator.native.selfcheck import self_check
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import (
    STAMP_BYTES,
    BurstBuffer,
    BurstWriter,
    DataRun,
    read_ack_run,
    read_data_run,
)
from emulator.transport.packets import (
    AETH_NAK_PSN_SEQUENCE_ERROR,
    BTH_BYTES,
    ICRC_BYTES,
    PSN_MASK,
    QPN_MASK,
    AckPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES
from emulator.transport.wire import FlowAddress, IcrcContext, decode, encode, layout_gso

ADDRESS = FlowAddress("10.1.0.1", "10.1.0.2", 49152, dscp=26)
BUFFER_BYTES = 65535 * 2
MODULE, WHY_NOT = load("burst")
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native path absent: {WHY_NOT}")
SEGMENT_OPCODES = [int(op) for op in (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST)]
SEGMENT_OPCODES += [int(op) for op in (Opcode.SEND_ONLY, Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST)]


def _module() -> ModuleType:
    assert MODULE is not None
    return MODULE


def test_extension_is_built() -> None:
    """Where its sources and a C compiler are, the extension must be built and current: CI runs
    ./setup.sh, and a silent fallback there would leave the native path untested."""
    if not (HERE / "burst.c").exists() or shutil.which("gcc") is None:
        pytest.skip("no native sources or no gcc here: the Python path is the only one")
    assert "burst" in module_names()
    assert not stale("burst"), f"{built_path('burst')} is missing or stale: {WHY_NOT}"
    assert MODULE is not None, WHY_NOT


def _wire_segments(burst: Burst, data: bytes) -> list[bytes]:
    """The burst's segments as the buffer holds them."""
    out = []
    at = 0
    for i in range(burst.count):
        size = burst.segment_bytes if i < burst.count - 1 else burst.last_segment_bytes
        out.append(data[at : at + size])
        at += size
    assert at == len(data)
    return out


def _burst(
    draw_psn: int,
    count: int,
    payload: int,
    last_payload: int,
    opcodes: list[int],
    acks: list[int],
    tags: list[int] | None,
    tag: int,
    dest_qp: int,
) -> Burst:
    n = payload
    segment = BTH_BYTES + n + (-n & 3) + ICRC_BYTES
    return Burst(
        dest_qp,
        draw_psn,
        count,
        segment,
        payload,
        last_payload,
        bytes(opcodes),
        sorted(set(acks)),
        tag=tag,
        tags=bytes(tags) if tags is not None else None,
    )


@st.composite
def bursts(draw: st.DrawFn, buffers: int = 1) -> Burst:
    """Bursts as poll_burst cuts them for `buffers` GSO buffers of 64 KB and 64 segments."""
    payload = draw(st.integers(256, 4096))
    segment = BTH_BYTES + payload + (-payload & 3) + ICRC_BYTES
    count = draw(st.integers(1, buffers * min(64, GSO_MAX_BUFFER_BYTES // segment)))
    shorter = count > 1 and draw(st.booleans())
    last_payload = draw(st.integers(0, payload - 1)) if shorter else payload
    opcodes = draw(
        st.one_of(
            st.just([int(Opcode.SEND_MIDDLE)] * count),
            st.lists(st.sampled_from(SEGMENT_OPCODES), min_size=count, max_size=count),
        )
    )
    acks = draw(st.lists(st.integers(0, count - 1), max_size=count))
    tags = draw(st.one_of(st.none(), st.lists(st.integers(0, 63), min_size=count, max_size=count)))
    # PSNs near the 24-bit wrap half of the time
    psn = draw(st.one_of(st.integers(0, PSN_MASK), st.integers(PSN_MASK - 70, PSN_MASK)))
    return _burst(
        psn,
        count,
        payload,
        last_payload,
        opcodes,
        acks,
        tags,
        draw(st.integers(0, 63)),
        draw(st.integers(0, QPN_MASK)),
    )


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    burst_list=st.lists(bursts(), min_size=1, max_size=4),
    gso=st.booleans(),
    stamps=st.booleans(),
    departed_ns=st.sampled_from([0, 1, 1_764_000_000_123_456_789]),
    spacing_ns=st.sampled_from([0, 8_000, 1 << 40]),
)
def test_native_layout_is_the_python_writers_byte_for_byte(
    burst_list: list[Burst], gso: bool, stamps: bool, departed_ns: int, spacing_ns: int
) -> None:
    """Several bursts in a row into one buffer each (template kept, reshaped, refilled), as
    the engine writes them: every byte the same as BurstWriter's."""
    icrc = IcrcContext(ADDRESS)
    ours = BurstBuffer(BUFFER_BYTES, stamps=stamps)
    theirs = BurstBuffer(BUFFER_BYTES, stamps=stamps)
    flow = NativeBursts(_module(), ours).flow(BurstWriter(icrc, ours, 64))
    reference = BurstWriter(icrc, theirs, 64)
    for burst in burst_list:
        got = flow.write(burst, gso=gso, departed_ns=departed_ns, spacing_ns=spacing_ns)
        want = reference.write(burst, gso=gso, departed_ns=departed_ns, spacing_ns=spacing_ns)
        assert got == want == burst.wire_bytes
        assert ours.data[:got] == theirs.data[:want]


@needs_native
def test_python_and_native_writers_share_one_buffer() -> None:
    """A flow on the native path and one the Python writer lays out (a burst the compact form
    does not describe) take turns in the worker's buffer: each leaves it as the other expects."""
    icrc = IcrcContext(ADDRESS)
    shared = BurstBuffer(BUFFER_BYTES, stamps=True)
    flow = NativeBursts(_module(), shared).flow(BurstWriter(icrc, shared, 64))
    reference = BurstWriter(icrc, BurstBuffer(BUFFER_BYTES, stamps=True), 64)
    middle = int(Opcode.SEND_MIDDLE)
    full = _burst(100, 20, 1024, 1024, [middle] * 20, [19], None, 3, 77)
    with_payload = Burst(
        77,
        120,
        2,
        1040,
        1024,
        1024,
        bytes([middle, middle]),
        [1],
        packets=[
            DataPacket(77, 120, middle, False, 1024, payload=b"\xab" * 1024),
            DataPacket(77, 121, middle, True, 1024, payload=b"\xcd" * 1024),
        ],
    )
    for burst in (full, with_payload, full, with_payload, full):
        got = flow.write(burst, departed_ns=5, spacing_ns=7)
        want = reference.write(burst, departed_ns=5, spacing_ns=7)
        assert shared.data[:got] == reference.buf[:want]


def _scapy_icrc_ok(wire: bytes) -> bool:
    again = IP(wire).copy()
    again[BTH].icrc = None  # scapy recomputes it on build
    return raw(again)[-4:] == wire[-4:]


@needs_native
@settings(max_examples=40, deadline=None)
@given(burst=bursts(), gso=st.booleans(), stamps=st.booleans())
def test_native_segments_are_valid_rocev2_for_scapy(burst: Burst, gso: bool, stamps: bool) -> None:
    """Each segment as the wire carries it (IP id = its index with GSO, 0 without) parses in
    scapy (the oracle) as RoCEv2 with a valid ICRC and the fields the burst says."""
    icrc = IcrcContext(ADDRESS)
    buf = BurstBuffer(BUFFER_BYTES, stamps=stamps)
    flow = NativeBursts(_module(), buf).flow(BurstWriter(icrc, buf, 64))
    used = flow.write(burst, gso=gso, departed_ns=1_764_000_000_000_000_000, spacing_ns=9)
    for i, segment in enumerate(_wire_segments(burst, bytes(buf.data[:used]))):
        wire = raw(
            IP(src=ADDRESS.src, dst=ADDRESS.dst, id=i if gso else 0, flags="DF", tos=0x6A)
            / UDP(sport=ADDRESS.sport, dport=4791)
            / Raw(segment)
        )
        parsed = IP(wire)
        assert BTH in parsed and _scapy_icrc_ok(wire), f"segment {i}"
        bth = parsed[BTH]
        assert bth.opcode == burst.opcodes[i]
        assert bth.psn == (burst.psn + i) & PSN_MASK
        assert bth.ackreq == (i in burst.ack_req_at)
        assert bth.dqpn == burst.dest_qp
        assert bth.resv6 == (burst.tags[i] if burst.tags is not None else burst.tag)
        packet = decode(segment)
        assert isinstance(packet, DataPacket)
        last = i == burst.count - 1
        assert packet.payload_bytes == (burst.last_payload_bytes if last else burst.payload_bytes)
        if stamps and packet.payload_bytes >= STAMP_BYTES:
            assert segment[BTH_BYTES : BTH_BYTES + 8] != bytes(8)


@needs_native
def test_self_check_passes_and_catches_a_wrong_layout_or_reader() -> None:
    assert self_check(_module()) == ""
    real = _module().lib

    def layout_one_bit_off(buf, *args):  # type: ignore[no-untyped-def]
        used = real.rocev2_layout(buf, *args)
        buf[used - 1] = bytes([buf[used - 1][0] ^ 1])  # the last ICRC byte
        return used

    def reader_finding_no_run(*args):  # type: ignore[no-untyped-def]
        return 0

    for name, wrong in (
        ("rocev2_layout", layout_one_bit_off),
        ("rocev2_read_data_run", reader_finding_no_run),
    ):
        functions = {f: getattr(real, f) for f in dir(real) if f.startswith("rocev2")}
        lib = SimpleNamespace(**{**functions, name: wrong})
        module = SimpleNamespace(ffi=_module().ffi, lib=lib)
        assert "differs" in self_check(module)  # type: ignore[arg-type]


@needs_native
def test_native_send_delivers_the_segments_and_reports_errors_as_errno() -> None:
    """GSO sends over loopback (one buffer; several in one sendmmsg) arrive as the burst's
    datagrams; a send the kernel refuses comes back as -errno, per buffer (the engine's
    SendPath._send_failed takes it from there)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        rx.settimeout(5)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        tx.bind(("127.0.0.1", 0))
        tx.setblocking(False)
        address = FlowAddress("127.0.0.1", "127.0.0.1", tx.getsockname()[1])
        buf = BurstBuffer(BUFFER_BYTES)
        writer = BurstWriter(IcrcContext(address), buf, 64)
        native = NativeBursts(_module(), buf)
        flow = native.flow(writer, tx, rx.getsockname(), tos=0x68)
        reference = BurstWriter(IcrcContext(address), BurstBuffer(BUFFER_BYTES), 64)
        middle = int(Opcode.SEND_MIDDLE)
        burst = _burst(PSN_MASK - 1, 10, 1024, 1024, [middle] * 10, [4, 9], None, 0, 9)
        for per_buffer, sizes in ((64, [10]), (4, [4, 4, 2])):
            assert flow.layout_send(burst, 0, 0, per_buffer) == len(sizes)
            assert list(flow.results[0 : len(sizes)]) == [n * burst.segment_bytes for n in sizes]
            expected = reference.buf[: reference.write(burst, ids_every=per_buffer)]
            assert b"".join(rx.recv(65535) for _ in range(10)) == expected
        # one segment: a datagram alone (no GSO control message)
        single = _burst(7, 1, 1024, 1024, [int(Opcode.SEND_ONLY)], [0], None, 0, 9)
        assert flow.layout_send(single, 0, 0, 64) == 1
        assert flow.results[0] == single.segment_bytes
        assert decode(rx.recv(65535)).psn == 7  # type: ignore[union-attr]
        # a datagram above what IPv4 carries, and a socket closed under the flow: every
        # buffer of the send is refused on its own
        assert flow.send_datagram(70_000) == -errno.EMSGSIZE
        dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dead_flow = native.flow(writer, dead, rx.getsockname())
        dead.close()
        assert dead_flow.send_datagram(10) == -errno.EBADF
        assert dead_flow.send(3 * 1040, 1040, 2) == 2
        assert list(dead_flow.results[0:2]) == [-errno.EBADF, -errno.EBADF]
    finally:
        rx.close()
        tx.close()


def _same_run(got: DataRun | None, want: DataRun | None) -> bool:
    if got is None or want is None:
        return got is want
    return (
        got.dest_qp,
        got.psn,
        tuple(got.opcodes),
        got.ack_req_at,
        got.payload_bytes,
        got.last_payload_bytes,
    ) == (
        want.dest_qp,
        want.psn,
        tuple(want.opcodes),
        want.ack_req_at,
        want.payload_bytes,
        want.last_payload_bytes,
    )


@needs_native
@settings(max_examples=300, deadline=None)
@given(
    burst=bursts(),
    flips=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 15), st.integers(1, 255))),
    cut=st.integers(0, 40),
    gro=st.booleans(),
)
def test_native_reader_reads_gro_reads_as_read_data_run_does(
    burst: Burst, flips: list[tuple[int, int, int]], cut: int, gro: bool
) -> None:
    """The C reader against read_data_run on a burst as one GRO read, its header bytes (BTH,
    first payload bytes) spoiled here and there and its end cut: the same run, or neither."""
    buf = BurstBuffer(BUFFER_BYTES)
    used = BurstWriter(IcrcContext(ADDRESS), buf, 64).write(burst)
    data = bytearray(buf.data[:used])
    for index, at, xor in flips:
        if index < burst.count:
            data[index * burst.segment_bytes + at] ^= xor
    nbytes = max(0, used - cut)
    receive = bytearray(BUFFER_BYTES)
    receive[:nbytes] = data[:nbytes]
    reader = NativeRunReader(_module(), receive)
    segment = burst.segment_bytes if gro else 0
    assert _same_run(reader.read(nbytes, segment), read_data_run(receive, nbytes, segment))


@needs_native
@settings(max_examples=150, deadline=None)
@given(burst=bursts(buffers=4), stamps=st.booleans(), every=st.sampled_from([1, 5, 15, 62, 64]))
def test_bursts_of_several_gso_buffers_restart_their_ip_ids_in_each(
    burst: Burst, stamps: bool, every: int
) -> None:
    """A burst sent as GSO buffers of `every` segments (the native path's several buffers per
    poll): the same bytes as the Python writer's for those IP ids, which scapy accepts."""
    icrc = IcrcContext(ADDRESS)
    ours = BurstBuffer(4 * BUFFER_BYTES, stamps=stamps)
    flow = NativeBursts(_module(), ours).flow(BurstWriter(icrc, ours, 64))
    reference = BurstWriter(icrc, BurstBuffer(4 * BUFFER_BYTES, stamps=stamps), 64)
    got = flow.write(burst, departed_ns=11, spacing_ns=3, ids_every=every)
    want = reference.write(burst, departed_ns=11, spacing_ns=3, ids_every=every)
    assert got == want and ours.data[:got] == reference.buf[:want]
    for i, segment in enumerate(_wire_segments(burst, bytes(ours.data[:got]))):
        if i % 17 and i != burst.count - 1:
            continue  # scapy is slow: a sample, and the last
        wire = raw(
            IP(src=ADDRESS.src, dst=ADDRESS.dst, id=i % every, flags="DF")
            / UDP(sport=ADDRESS.sport, dport=4791)
            / Raw(segment)
        )
        assert _scapy_icrc_ok(wire), f"segment {i}"


@needs_native
@settings(max_examples=200, deadline=None)
@given(
    acks=st.lists(
        st.tuples(
            st.integers(0, PSN_MASK),
            st.sampled_from([0x1F, 0x00, AETH_NAK_PSN_SEQUENCE_ERROR]),
            st.integers(0, (1 << 24) - 1),
        ),
        min_size=1,
        max_size=64,
    ),
    dest_qp=st.integers(0, QPN_MASK),
)
def test_native_acks_are_the_codecs(acks: list[tuple[int, int, int]], dest_qp: int) -> None:
    """The ACKs (and NAKs) of one read to one QP: wire.encode's bytes for one, layout_gso's
    for several (ICRC for IP ids 0, 1, ...), which scapy accepts."""
    icrc = IcrcContext(ADDRESS)
    buf = bytearray(65535)
    packets = [AckPacket(dest_qp, psn, syndrome, msn) for psn, syndrome, msn in acks]
    used = NativeReplies(_module(), buf).flow(icrc, None, ("", 0), -1).layout(packets)
    if len(packets) == 1:
        assert bytes(buf[:used]) == encode(packets[0], icrc, 0)
    else:
        reference = bytearray(65535)
        want, segment = layout_gso(reference, packets, icrc, ip_id_first=0)
        assert used == want and buf[:used] == reference[:want] and segment == 20
    for i in (0, len(packets) - 1):
        wire = raw(
            IP(src=ADDRESS.src, dst=ADDRESS.dst, id=i, flags="DF")
            / UDP(sport=ADDRESS.sport, dport=4791)
            / Raw(bytes(buf[20 * i : 20 * i + 20]))
        )
        assert _scapy_icrc_ok(wire)
        assert decode(wire[28:]) == packets[i]


@needs_native
def test_native_recv_reads_what_recvmsg_into_and_read_ancillary_read() -> None:
    """A rank socket's read over loopback (a GSO send arrives whole at a UDP_GRO socket, with
    its ToS, GRO segment size and kernel time): the same bytes and fields either way."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        for level, option in ((socket.IPPROTO_IP, IP_RECVTOS), (socket.SOL_SOCKET, SO_TIMESTAMPNS)):
            rx.setsockopt(level, option, 1)
        gro = True
        try:
            rx.setsockopt(SOL_UDP, UDP_GRO, 1)
        except OSError:
            gro = False  # a kernel without UDP GRO: plain datagrams
        rx.setblocking(False)
        tx.bind(("127.0.0.1", 0))
        receive = bytearray(BUFFER_BYTES)
        reader = NativeRunReader(_module(), receive)
        assert reader.recv(rx.fileno())[0] == -errno.EAGAIN
        payload = bytes(range(256)) * 12
        cmsgs = [gso_cmsg(1024), tos_cmsg(0x6A)]
        reads = []
        for native in (True, False):
            tx.sendmsg([payload], cmsgs, 0, rx.getsockname())
            select.select([rx], [], [], 5)
            if native:
                nbytes, tos, gso_size, rx_ns, source = reader.recv(rx.fileno())
                data = bytes(receive[:nbytes])
            else:
                data_buf = bytearray(BUFFER_BYTES)
                nbytes, anc, _, source = rx.recvmsg_into([data_buf], ANCILLARY_BYTES)
                tos, gso_size, rx_ns = read_ancillary(anc)
                data = bytes(data_buf[:nbytes])
            assert rx_ns > 0
            reads.append((nbytes, data, tos, gso_size, source))
        assert reads[0] == reads[1]
        expected_size = len(payload) if gro else 1024
        assert reads[0][0] == expected_size and reads[0][2] == 0x6A
        assert reads[0][3] == (1024 if gro else 0)
        assert reads[0][4] == tx.getsockname()
    finally:
        rx.close()
        tx.close()


@needs_native
def test_native_recv_reads_ack_runs_as_read_ack_run() -> None:
    """ACKs sent over loopback as the engine sends them (several in one GSO send, arriving as
    one read at a UDP_GRO socket; one alone): the reader's ack_qp and ack_psns are
    read_ack_run's; a NAK among them, or another QP, is no run (-1)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind(("127.0.0.1", 0))
        # without GRO each ACK is its own read: still read_ack_run's answer
        with contextlib.suppress(OSError):
            rx.setsockopt(SOL_UDP, UDP_GRO, 1)
        rx.setblocking(False)
        tx.bind(("127.0.0.1", 0))
        icrc = IcrcContext(FlowAddress("127.0.0.1", "127.0.0.1", tx.getsockname()[1]))
        receive = bytearray(BUFFER_BYTES)
        reader = NativeRunReader(_module(), receive)
        cases = [
            [AckPacket(0x0ABCDE, psn) for psn in (PSN_MASK, 0, 15)],
            [AckPacket(7, 99)],
            [AckPacket(7, 1), AckPacket(7, 2, AETH_NAK_PSN_SEQUENCE_ERROR)],
            [AckPacket(7, 1), AckPacket(8, 2)],
        ]
        for acks in cases:
            out = bytearray(4096)
            used, segment = layout_gso(out, acks, icrc, ip_id_first=0)
            cmsgs = [gso_cmsg(segment)] if len(acks) > 1 else []
            tx.sendmsg([out[:used]], cmsgs, 0, rx.getsockname())
            while True:
                select.select([rx], [], [], 5)
                nbytes, _, gso_size, _, _ = reader.recv(rx.fileno())
                want = read_ack_run(receive, nbytes, gso_size)
                if want is None:
                    assert reader.ack_qp == -1
                else:
                    assert (reader.ack_qp, reader.ack_psns()) == want
                if select.select([rx], [], [], 0.05)[0] == []:
                    break  # without GRO: the ACKs one by one
        assert reader.ack_qp == -1  # the last case: two QPs
    finally:
        rx.close()
        tx.close()
