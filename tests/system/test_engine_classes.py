"""Traffic classes on the wire: every packet carries the DSCP its class asks for (data per queue
pair, ACK/NAK, CNP) and the ECN field the scenario gives data, as a capture of the veth shows;
the engine's per-class counters equal what the capture counts."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from scapy.layers.inet import IP

from emulator.engine.coordinator import run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import Capture, PairInfo, read_pcap_ipv4
from emulator.transport.packets import AckPacket, CnpPacket, DataPacket, Packet
from emulator.transport.params import TransportParams
from emulator.transport.wire import decode, parse_ipv4_packet

pytestmark = pytest.mark.system
MTU_BYTES = 4096


def _capture_run(
    p: PairInfo, tmp_path: Path, transport: TransportParams
) -> tuple[dict[str, dict[str, int]], list[tuple[int, int, Packet]]]:
    """Two messages on QP 0 and QP 1 of one peer; returns the run's per-class counters and
    (dscp, ecn, packet) of everything the capture saw."""
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=200e6),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=200e6),
    ]
    flows = [
        EngineFlow(id=1, src=0, dst=1, qp=0, udp_sport=50600, bytes=2_000_000),
        EngineFlow(id=2, src=0, dst=1, qp=1, udp_sport=50601, bytes=1_000_000),
    ]
    capture = Capture(p.sender_ns, p.sender_if, os.path.join(tmp_path, "classes.pcap"))
    try:
        outcome = run_plan(ranks, flows, transport=transport, engine=EngineParams(workers=2))
    finally:
        capture.stop()
    assert outcome.received_bytes == {1: 2_000_000, 2: 1_000_000}
    assert capture.kernel_drops == 0
    seen: list[tuple[int, int, Packet]] = []
    for wire in read_pcap_ipv4(capture.path):
        d = parse_ipv4_packet(wire)
        tos = IP(wire).tos
        seen += [(tos >> 2, tos & 3, decode(one)) for one in _segments(d.udp_payload)]
    return outcome.metadata["classes"], seen


# What arrives at the capture's veth is seen after GRO, which merges back-to-back ACKs (or CNPs)
# of one QP into one datagram: split them at their fixed size (data leaves that veth, unmerged).
FIXED_SIZE_BYTES = {0x11: 20, 0x81: 32}  # ACKNOWLEDGE, CNP: BTH + AETH or 16 bytes + ICRC


def _segments(payload: bytes) -> list[bytes]:
    size = FIXED_SIZE_BYTES.get(payload[0], len(payload)) if payload else 0
    if not size or len(payload) % size:
        return [payload]
    return [payload[at : at + size] for at in range(0, len(payload), size)]


def test_each_class_carries_its_dscp_and_ecn_and_is_counted(
    veth_pair: PairInfo, tmp_path: Path
) -> None:
    transport = TransportParams(
        congestion_control="none",
        path_mtu_bytes=MTU_BYTES,
        qp_dscp=(26, 10),
        ack_dscp=46,
        data_ecn="ect1",
    )
    classes, seen = _capture_run(veth_pair, tmp_path, transport)
    data = [(dscp, ecn, pkt) for dscp, ecn, pkt in seen if isinstance(pkt, DataPacket)]
    acks = [(dscp, ecn) for dscp, ecn, pkt in seen if isinstance(pkt, AckPacket)]
    by_qp: dict[int, set[tuple[int, int]]] = {}
    for dscp, ecn, pkt in data:
        by_qp.setdefault(pkt.dest_qp, set()).add((dscp, ecn))
    # the two QPs (engine numbers 1 and 2, for the peer's QP 0 and 1): each in its own class
    assert sorted(by_qp.values(), key=lambda v: -min(v)[0]) == [{(26, 1)}, {(10, 1)}]
    assert acks and set(acks) == {(46, 0)}  # ACKs: their class, not ECN-capable
    # the engine counted exactly what the wire carried, class by class
    per_class = Counter(dscp for dscp, _, pkt in data)
    assert {d: classes[str(d)]["tx_packets"] for d in (26, 10)} == dict(per_class)
    assert classes["46"]["tx_packets"] == len(acks)
    # and what arrived at the other rank (a veth loses nothing): data at one end, ACKs at the other
    for dscp in (26, 10, 46):
        assert classes[str(dscp)]["rx_packets"] == classes[str(dscp)]["tx_packets"]


def test_data_sent_marked_ce_asks_for_cnps_in_their_own_class(
    veth_pair: PairInfo, tmp_path: Path
) -> None:
    transport = TransportParams(path_mtu_bytes=MTU_BYTES, data_ecn="ce", cnp_dscp=48)
    classes, seen = _capture_run(veth_pair, tmp_path, transport)
    assert {(d, e) for d, e, pkt in seen if isinstance(pkt, DataPacket)} == {(26, 3)}
    cnps = [(d, e) for d, e, pkt in seen if isinstance(pkt, CnpPacket)]
    assert cnps and set(cnps) == {(48, 0)}
    assert classes["48"]["tx_packets"] == len(cnps)
