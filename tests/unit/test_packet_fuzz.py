"""Property tests: whatever arrives on port 4791 is a packet or a counted drop, never an exception.

The receive path has three parsers: `decode` (one datagram), and `read_data_run` / `read_ack_run`
(a GRO read of many, cut at the segment size the kernel reports). They get random bytes, random
segment sizes and valid packets with bits flipped, bytes cut off or appended; a RoceEndpoint with
real queue pairs gets the same datagrams and must only count drops. Inputs that once broke a
parser are kept in fuzz_corpus/packets/ (one file each: 2-byte big-endian segment size, then the
read) and replayed every run. Bounded: a few hundred examples per property.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.engine.sockets import segments
from emulator.transport.burst_wire import read_ack_run, read_data_run
from emulator.transport.endpoint import RoceEndpoint
from emulator.transport.events import DROP_REASONS
from emulator.transport.packets import AckPacket, CnpPacket, DataPacket, Opcode
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import FlowAddress, IcrcContext, MalformedPacket, decode, encode

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus" / "packets"
ICRC = IcrcContext(FlowAddress("10.0.0.1", "10.0.0.2", 50000))
SEEDS = [
    encode(DataPacket(1, 0, Opcode.SEND_ONLY, True, 64), ICRC),
    encode(DataPacket(1, 5, Opcode.SEND_MIDDLE, False, 1024), ICRC),
    encode(DataPacket(2, 9, Opcode.WRITE_FIRST, False, 100, dma_length_bytes=300), ICRC),
    encode(AckPacket(1, 3), ICRC),
    encode(AckPacket(1, 3, 0x60), ICRC),
    encode(CnpPacket(1), ICRC),
]
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _endpoint() -> RoceEndpoint:
    ep = RoceEndpoint()
    params = TransportParams(path_mtu_bytes=1024)
    tx = SendQueuePair(qpn=1, dest_qp=1, params=params, line_rate_bps=1e9, events=ep.events)
    tx.post_send(now=0.0, message_id=1, size_bytes=8 * 1024)
    tx.poll_batch(now=0.0, max_packets=8)
    ep.add_sender(tx, peer=("10.0.0.2", 50000))
    ep.add_receiver(
        ReceiveQueuePair(qpn=1, remote_qp=1, params=params, events=ep.events),
        peer=("10.0.0.2", 50000),
    )
    return ep


def _parse_everything(data: bytes, segment: int) -> None:
    """What the engine does with one read: the run parsers, then datagram by datagram."""
    ep = _endpoint()
    run = read_data_run(data, len(data), segment)
    if run is not None:  # the engine's fast path hands a run to the QP it names
        assert run.payload_bytes >= 0 and len(run.opcodes) >= 1
        ep.receivers[1].on_data_run(
            now=1e-3,
            psn=run.psn,
            opcodes=run.opcodes,
            ack_req_at=run.ack_req_at,
            payload_bytes=run.payload_bytes,
            last_payload_bytes=run.last_payload_bytes,
            ce=False,
        )
    acks = read_ack_run(data, len(data), segment)
    if acks is not None:
        assert acks[1]
        ep.senders[1].on_acks(now=1e-3, psns=acks[1])
    for a, b in segments(len(data), segment):
        with contextlib.suppress(MalformedPacket):
            decode(data[a:b])
        for source in (("10.0.0.2", 50000), ("10.9.9.9", 1)):
            ep.on_datagram(now=1e-3, data=data[a:b], ce=bool(b & 1), source=source)
    assert set(ep.drop_counts()) <= set(DROP_REASONS)


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 320))
def test_random_reads_are_packets_or_drops(data: bytes, segment: int) -> None:
    _parse_everything(data, segment)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, int]:
    seeds = draw(st.lists(st.sampled_from(SEEDS), min_size=1, max_size=4))
    buf = bytearray(b"".join(seeds))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "append", "byte"]))
        if kind == "flip" and buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut" and buf:
            del buf[draw(st.integers(0, len(buf) - 1)) :]
        elif kind == "append":
            buf += draw(st.binary(min_size=1, max_size=16))
        elif kind == "byte" and buf:
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    segment = draw(st.sampled_from([0, len(seeds[0]), 1, 12, 16, 28, 32]))
    return bytes(buf), segment


@FUZZ
@given(mutated())
def test_mutated_valid_reads_are_packets_or_drops(case: tuple[bytes, int]) -> None:
    _parse_everything(*case)


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.bin"))


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_corpus_inputs_stay_fixed(path: Path) -> None:
    raw = path.read_bytes()
    _parse_everything(raw[2:], int.from_bytes(raw[:2], "big"))


def test_the_corpus_is_there() -> None:
    assert len(_corpus()) >= 5


def _case(name: str) -> tuple[bytes, int]:
    raw = (CORPUS / f"{name}.bin").read_bytes()
    return raw[2:], int.from_bytes(raw[:2], "big")


def test_runs_the_fast_paths_must_refuse_go_packet_by_packet() -> None:
    data, segment = _case("psn_wrap_run")
    assert read_data_run(data, len(data), segment) is None
    data, segment = _case("ack_then_nak_run")
    assert read_ack_run(data, len(data), segment) is None
