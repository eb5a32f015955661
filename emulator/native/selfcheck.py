"""The engine's self-check of emulator.native._burst: before a worker trusts the module it lays
out a few bursts and ACKs and parses a few reads with it and with the Python code, byte for byte
(emulator/engine/native_path.py runs it; a difference leaves the worker on the Python path).
"""

from __future__ import annotations

import errno
from types import ModuleType

from emulator.native.acks import NativeReplies
from emulator.native.burst import NativeBursts
from emulator.native.reads import NativeRunReader
from emulator.transport.burst import Burst
from emulator.transport.burst_wire import BurstBuffer, BurstWriter, read_data_run
from emulator.transport.packets import AETH_NAK_PSN_SEQUENCE_ERROR, PSN_MASK, AckPacket, Opcode
from emulator.transport.wire import FlowAddress, IcrcContext, encode, layout_gso

_CHECK_ADDRESS = FlowAddress("10.11.12.13", "10.11.12.14", 49999, dscp=26)
_MIDDLE = int(Opcode.SEND_MIDDLE)


def _check_bursts() -> list[tuple[Burst, bool, int]]:
    """(burst, gso, departed_ns): PSN wraps, AckReq patterns, mixed opcodes, per-segment tags,
    shorter last segments, one segment, the smallest and largest MTU."""
    ops = bytes([Opcode.SEND_FIRST, *[_MIDDLE] * 13, Opcode.SEND_LAST])
    return [
        (
            Burst(
                0x123456,
                PSN_MASK - 30,
                64,
                1040,
                1024,
                1024,
                bytes([_MIDDLE]) * 64,
                [15, 31, 47, 63],
                tag=5,
            ),
            True,
            1_700_000_000_123_456_789,
        ),
        (Burst(0x000777, 5, 15, 4112, 4096, 4096, ops, [14], tags=bytes(range(15))), True, 0),
        (Burst(0x000777, 0xFFFFF0, 15, 4112, 4096, 4096, ops, [0, 9, 14], tag=63), False, 42),
        (
            Burst(
                0x00ABCD,
                1000,
                7,
                272,
                256,
                100,
                bytes([_MIDDLE] * 6 + [Opcode.SEND_LAST]),
                [6],
                tag=1,
            ),
            True,
            7,
        ),
        (Burst(0x00ABCD, PSN_MASK, 1, 1040, 1024, 1024, bytes([Opcode.SEND_ONLY]), [0]), True, 9),
        (Burst(0x00ABCD, 3, 3, 28, 10, 10, bytes([_MIDDLE]) * 3, [1]), True, 11),
    ]


def self_check(module: ModuleType, max_segments: int = 64) -> str:
    """ "" when burst.c lays out the check bursts byte for byte as BurstWriter does (with and
    without stamps, GSO on and off) and its send reports errors as -errno; else why not."""
    for stamps in (False, True):
        ours = BurstBuffer(65535 * 2, stamps=stamps)
        theirs = BurstBuffer(65535 * 2, stamps=stamps)
        icrc = IcrcContext(_CHECK_ADDRESS)
        native = NativeBursts(module, ours)
        flow = native.flow(BurstWriter(icrc, ours, max_segments))
        reference = BurstWriter(icrc, theirs, max_segments)
        for i, (burst, gso, departed) in enumerate(_check_bursts()):
            spacing = 8 * burst.segment_bytes
            for every in (0, 7):  # one GSO buffer; GSO buffers of 7 segments each
                got = flow.write(
                    burst, gso=gso, departed_ns=departed, spacing_ns=spacing, ids_every=every
                )
                want = reference.write(
                    burst, gso=gso, departed_ns=departed, spacing_ns=spacing, ids_every=every
                )
                if got != want or ours.data[:got] != theirs.data[:want]:
                    return (
                        "its layout differs from the Python writer's "
                        f"(check burst {i}, stamps {stamps}, ids every {every})"
                    )
    why = _check_reader(module) or _check_acks(module)
    if why:
        return why
    sent = NativeBursts(module, BurstBuffer(64)).lib.rocev2_send(-1, b"x", 1, 0, -1, 0, 0)
    if sent != -errno.EBADF:
        return f"its send on a closed descriptor returned {sent}, not -EBADF"
    return ""


def _check_reader(module: ModuleType) -> str:
    """The C reader against read_data_run on the check bursts as received (one GRO read each),
    and on reads that are not runs (another QP, a gap, a RETH, a wrap, a bad pad count)."""
    buf = bytearray(65535 * 2)
    reader = NativeRunReader(module, buf)
    writer = BurstWriter(IcrcContext(_CHECK_ADDRESS), BurstBuffer(65535 * 2), 64)
    cases: list[tuple[bytes, int]] = []
    for burst, gso, departed in _check_bursts():
        used = writer.write(burst, gso=gso, departed_ns=departed)
        data = bytes(writer.buf[:used])
        cases.append((data, burst.segment_bytes))
        segment = burst.segment_bytes
        if burst.count > 2:
            spoiled = bytearray(data)
            spoiled[segment + 7] ^= 1  # the second segment's QP
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[2 * segment + 11] ^= 4  # a gap
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[segment] = Opcode.WRITE_FIRST  # a RETH
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[1] ^= 1  # a transport header version
            cases.append((bytes(spoiled), segment))
            spoiled = bytearray(data)
            spoiled[segment + 4] ^= 0x15  # only the tag: still a run
            cases.append((bytes(spoiled), segment))
        cases.append((data[:segment], 0))  # one datagram alone
        cases.append((data[:15], 0))  # too short
    for i, (data, segment) in enumerate(cases):
        buf[: len(data)] = data
        got = reader.read(len(data), segment)
        want = read_data_run(buf, len(data), segment)
        if (got is None) != (want is None) or (
            got is not None
            and want is not None
            and (
                (got.dest_qp, got.psn, tuple(got.opcodes), got.ack_req_at)
                != (want.dest_qp, want.psn, tuple(want.opcodes), want.ack_req_at)
                or (got.payload_bytes, got.last_payload_bytes)
                != (want.payload_bytes, want.last_payload_bytes)
            )
        ):
            return f"its reader differs from read_data_run (check read {i})"
    return ""


def _check_acks(module: ModuleType) -> str:
    """The C ACK layout against wire.encode (one ACK) and wire.layout_gso (several)."""
    icrc = IcrcContext(_CHECK_ADDRESS)
    buf = bytearray(65535)
    flow = NativeReplies(module, buf).flow(icrc, None, ("", 0), -1)
    groups = [
        [AckPacket(0x00ABCD, PSN_MASK, 0x1F, 0xFFFFFF)],
        [AckPacket(0x123456, 5, AETH_NAK_PSN_SEQUENCE_ERROR, 77)],
        [AckPacket(0x000777, (PSN_MASK - 3 + i) & PSN_MASK, 0x1F, i) for i in range(9)],
    ]
    for i, acks in enumerate(groups):
        used = flow.layout(acks)
        if len(acks) == 1:
            want = encode(acks[0], icrc, 0)
        else:
            reference = bytearray(65535)
            want = bytes(reference[: layout_gso(reference, acks, icrc, ip_id_first=0)[0]])
        if bytes(buf[:used]) != want:
            return f"its ACKs differ from the codec's (check group {i})"
    return ""
