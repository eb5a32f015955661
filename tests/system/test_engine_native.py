"""The engine's native burst path on a veth pair: what it puts on the wire is valid RoCEv2 (every
ICRC checked on a capture at the sender's egress, where the kernel cut the GSO buffers into
packets with their IP ids, and scapy agrees on a sample), and forcing it off runs the Python
path, which the run's metadata then names with the reason.
"""

from __future__ import annotations

import os

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from emulator.engine.coordinator import run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import Capture, PairInfo, read_pcap_ipv4
from emulator.native import load
from emulator.transport.burst_wire import SEND_STAMP
from emulator.transport.packets import (
    AETH_ACK,
    ATTRIBUTION_TAG_AT,
    BTH_BYTES,
    AckPacket,
    DataPacket,
)
from emulator.transport.params import TransportParams
from emulator.transport.wire import decode, parse_ipv4_packet
from tests.system.prereq import require

pytestmark = pytest.mark.system

MTU_BYTES = 1024
SPORT = 49333
TAG = 9
MESSAGE_BYTES = (4 << 20) + 100


def _scapy_icrc_ok(packet: bytes) -> bool:
    again = IP(packet).copy()
    again[BTH].icrc = None  # scapy recomputes it on build
    return raw(again)[-4:] == packet[-4:]


def _one_flow(p: PairInfo) -> tuple[list[RankEndpoint], EngineFlow, TransportParams]:
    """Rank 0 (the pair's sender) sends rank 1 a 4 MB message plus 100 bytes (not a multiple of
    the MTU: the last packet is shorter, the Python codec writes it) at 2 Gb/s, without
    congestion control."""
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=2e9),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=2e9),
    ]
    flow = EngineFlow(id=3, src=0, dst=1, qp=0, udp_sport=SPORT, bytes=MESSAGE_BYTES, tag=TAG)
    transport = TransportParams(
        congestion_control="none", path_mtu_bytes=MTU_BYTES, retransmit_timeout_s=0.05
    )
    return ranks, flow, transport


@pytest.mark.parametrize("native", ["on", "off"])
def test_native_and_python_paths_put_valid_rocev2_on_the_wire(
    veth_pair: PairInfo, tmp_path, native: str
) -> None:
    if native == "on" and load("burst")[0] is None:
        require(f"the native path is not built here: {load('burst')[1]}")
    p = veth_pair
    ranks, flow, transport = _one_flow(p)
    capture = Capture(p.sender_ns, p.sender_if, os.path.join(tmp_path, "native.pcap"))
    try:
        engine = EngineParams(workers=2, one_way_latency=True, native=native)  # type: ignore[arg-type]
        outcome = run_plan(ranks, [flow], transport=transport, engine=engine)
    finally:
        capture.stop()

    assert outcome.received_bytes[3] == MESSAGE_BYTES
    data_path = outcome.metadata["data_path"]
    if native == "on":
        assert data_path["path"] == "native"
    else:
        assert data_path == {"path": "python", "reason": "engine.native: off"}
    assert outcome.metadata["send_path"] == "udp_gso"
    assert capture.kernel_drops == 0, "tcpdump lost packets: the checks below would be partial"

    data = []
    for wire in read_pcap_ipv4(capture.path):
        d = parse_ipv4_packet(wire)
        if d.address.src != p.sender_addr:
            # ACKs back (the Python codec's on both paths): the capture sees them after the
            # sender's GRO, several merged into one, where no ICRC can be checked
            continue
        assert d.icrc_ok, f"bad ICRC on the wire (IP id {d.ip_id})"
        packet = decode(d.udp_payload)
        assert isinstance(packet, DataPacket)
        assert d.udp_payload[ATTRIBUTION_TAG_AT] == TAG
        departed, _, _ = SEND_STAMP.unpack_from(d.udp_payload, BTH_BYTES)
        assert departed > 0  # every data packet carries its send stamp
        data.append((packet, wire))
    psns = sorted({packet.psn for packet, _ in data})
    assert psns == list(range(-(-MESSAGE_BYTES // MTU_BYTES)))
    assert any(packet.payload_bytes == 100 for packet, _ in data)  # the shorter last one
    # scapy (the oracle) on a sample over the capture and the ends
    for _, wire in [*data[::211], data[-1]]:
        parsed = IP(wire)
        assert parsed[UDP].dport == 4791 and parsed[BTH].resv6 == TAG
        assert _scapy_icrc_ok(wire)


@pytest.mark.parametrize("drain", [True, False])
def test_acks_of_reads_taken_in_c_are_valid_rocev2_on_the_wire(
    veth_pair: PairInfo, tmp_path, drain: bool
) -> None:
    """With the receive queue pairs' common path in C (engine.native_drain) the receiver's
    reads of in-order data are taken there and their ACKs sent from there: the message
    arrives whole, C took reads (none with the drain off), and every ACK on the wire at the
    receiver's egress has a valid ICRC, acknowledges a PSN of the flow in order and carries
    the message sequence number the Python receiver would (0: the message is not over)."""
    if load("burst")[0] is None:
        require(f"the native path is not built here: {load('burst')[1]}")
    p = veth_pair
    ranks, flow, transport = _one_flow(p)
    capture = Capture(p.receiver_ns, p.receiver_if, os.path.join(tmp_path, "acks.pcap"))
    try:
        engine = EngineParams(workers=2, native="on", native_drain=drain)
        outcome = run_plan(ranks, [flow], transport=transport, engine=engine)
    finally:
        capture.stop()
    assert outcome.received_bytes[3] == MESSAGE_BYTES
    taken = outcome.metadata["counters"].get("reads_taken_in_c", 0)
    assert (taken > 0) if drain else (taken == 0)
    assert capture.kernel_drops == 0, "tcpdump lost packets: the checks below would be partial"
    last_psn = -(-MESSAGE_BYTES // MTU_BYTES) - 1
    acked = []
    for wire in read_pcap_ipv4(capture.path):
        d = parse_ipv4_packet(wire)
        if d.address.src != p.receiver_addr:
            continue
        assert d.icrc_ok, f"bad ICRC on an ACK (IP id {d.ip_id})"
        ack = decode(d.udp_payload)
        assert isinstance(ack, AckPacket) and ack.syndrome == AETH_ACK
        assert ack.msn == (1 if ack.psn == last_psn else 0)
        acked.append(ack.psn)
    assert acked and acked == sorted(acked) and acked[-1] == last_psn
