"""Engine on a veth pair: a 64 MiB message arrives whole, and the wire carries valid RoCEv2.

The capture is taken at the sender's veth egress (after the kernel cut the GSO buffers into
MTU-sized packets, before the receiver's GRO merges them), so ICRCs are checked for the IP ids
and lengths the wire really carries.
"""

from __future__ import annotations

import os
import time

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from emulator.engine.coordinator import run_plan
from emulator.engine.native_path import NATIVE_BUFFERS_PER_POLL
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import Capture, PairInfo, read_pcap_ipv4
from emulator.transport.burst_wire import SEND_STAMP as STAMP
from emulator.transport.packets import (
    ATTRIBUTION_TAG_AT,
    BTH_BYTES,
    ICRC_BYTES,
    AckPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.params import TransportParams
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES
from emulator.transport.wire import decode, parse_ipv4_packet

pytestmark = pytest.mark.system

MESSAGE_BYTES = 64 << 20
MTU_BYTES = 4096
SPORT = 49321


def _scapy_icrc_ok(packet: bytes) -> bool:
    parsed = IP(packet)
    again = parsed.copy()
    again[BTH].icrc = None  # scapy recomputes it on build
    return raw(again)[-4:] == packet[-4:]


@pytest.mark.parametrize(
    ("offload", "message_bytes", "latency"),
    [("auto", MESSAGE_BYTES, False), ("off", 8 << 20, False), ("auto", 16 << 20, True)],
    ids=["gso-gro", "one-packet-per-send", "gso-gro-latency-stamps"],
)
def test_message_arrives_whole_as_valid_rocev2(
    veth_pair: PairInfo, tmp_path, offload: str, message_bytes: int, latency: bool
) -> None:
    """64 MiB with GSO/GRO; a smaller message through the fallback (one packet per call); and
    with one-way latency on, every data packet carrying its send stamp under a valid ICRC, and
    an attribution tag in its BTH reserved bits (emulator.planning.attribution)."""
    p = veth_pair
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=1e9),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=1e9),
    ]
    tag = 5 if latency else 0
    flow = EngineFlow(id=7, src=0, dst=1, qp=0, udp_sport=SPORT, bytes=message_bytes, tag=tag)
    transport = TransportParams(
        congestion_control="none", path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.05
    )
    capture = Capture(p.sender_ns, p.sender_if, os.path.join(tmp_path, "a0.pcap"))
    try:
        engine = EngineParams(
            workers=2,
            gso=offload,  # type: ignore[arg-type]
            gro=offload,  # type: ignore[arg-type]
            one_way_latency=latency,
        )
        outcome = run_plan(ranks, [flow], transport=transport, engine=engine)
    finally:
        capture.stop()

    assert outcome.received_bytes[7] == message_bytes
    measured = outcome.metadata["latency_by_class"]
    if latency:
        # one sample per receive read; a packet crosses one veth in well under 10 ms
        row = measured["26"]
        assert row["packets"] > 0 and 0 < row["p50_us"] <= row["p99_us"] <= row["max_us"] < 1e4
    else:
        assert measured == {}
    assert set(outcome.finished) == {7}
    expected_path = "one_per_send" if offload == "off" else "udp_gso"
    assert outcome.metadata["send_path"] == expected_path

    packets = read_pcap_ipv4(capture.path)
    data: list[tuple[DataPacket, bytes]] = []
    acks = 0
    for wire in packets:
        d = parse_ipv4_packet(wire)
        if d.address.src != p.sender_addr:
            # ACKs back (several to one QP leave as one GSO send): valid on the wire too
            assert d.icrc_ok, f"bad ICRC on an ACK on the wire (IP id {d.ip_id})"
            assert isinstance(decode(d.udp_payload), AckPacket)
            acks += 1
            continue
        assert d.icrc_ok, f"bad ICRC on the wire (IP id {d.ip_id})"
        assert d.udp_payload[ATTRIBUTION_TAG_AT] == tag  # FECN, BECN 0 and the tag
        assert d.ecn == 2  # ECT(0)
        assert d.address.sport == SPORT and d.address.dport == 4791
        packet = decode(d.udp_payload)
        assert isinstance(packet, DataPacket)
        data.append((packet, wire))
        departed, first_psn, spacing = STAMP.unpack_from(d.udp_payload, BTH_BYTES)
        if latency:
            # the send stamp: when its burst's first packet left, that packet's PSN (at most a
            # poll before this one: the native path takes up to NATIVE_BUFFERS_PER_POLL GSO
            # buffers of 64 segments in one poll, stamped alike) and the wire time of one
            # packet at the line rate (1 Gb/s)
            assert abs(departed - time.time_ns()) < 600e9
            assert 0 <= (packet.psn - first_psn) % (1 << 24) < 64 * NATIVE_BUFFERS_PER_POLL
            assert spacing == (MTU_BYTES + BTH_BYTES + ICRC_BYTES + IPV4_FRAME_OVERHEAD_BYTES) * 8
        else:
            assert (departed, first_psn, spacing) == (0, 0, 0)
    assert capture.kernel_drops == 0, "tcpdump lost packets: the checks below would be partial"
    assert acks > 0
    # First transmissions in PSN order 0..N-1 (a retransmission repeats an earlier PSN).
    expected_packets = message_bytes // MTU_BYTES
    firsts: dict[int, DataPacket] = {}
    for packet, _ in data:
        firsts.setdefault(packet.psn, packet)
    assert sorted(firsts) == list(range(expected_packets))
    order = [pkt.psn for pkt, _ in data if firsts[pkt.psn] is pkt]
    assert order == list(range(expected_packets))
    opcodes = [firsts[psn].opcode for psn in range(expected_packets)]
    assert opcodes[0] == Opcode.SEND_FIRST and opcodes[-1] == Opcode.SEND_LAST
    assert set(opcodes[1:-1]) == {Opcode.SEND_MIDDLE}
    assert sum(firsts[psn].payload_bytes for psn in firsts) == message_bytes
    assert all(p.dest_qp == firsts[0].dest_qp for p in firsts.values())
    # With GSO the kernel numbered each buffer's segments 0, 1, 2, ...; one per send: all 0.
    ids = {IP(w).id for _, w in data[:64]}
    assert len(ids) > 1 if expected_path == "udp_gso" else ids == {0}
    # scapy (the oracle) agrees on a sample spread over the capture: every 97th packet and the ends
    sample = [w for i, (_, w) in enumerate(data) if i % 97 == 0] + [data[-1][1]]
    for wire in sample:
        parsed = IP(wire)
        assert parsed[UDP].dport == 4791 and BTH in parsed
        assert parsed[BTH].resv6 == tag
        assert _scapy_icrc_ok(wire)
