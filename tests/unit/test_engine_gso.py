"""The engine's fast GSO layout gives the same bytes as the transport's layout_gso (the codec that
scapy checks), for every mix of opcodes, AckReq bits, PSNs near the 24-bit wrap and a short last
packet."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.engine.gso import GsoWriter
from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.wire import FlowAddress, IcrcContext, layout_gso

ADDRESS = FlowAddress("10.1.2.3", "10.4.5.6", 50123, dscp=26)
OPCODES = [Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.WRITE_MIDDLE]


@settings(max_examples=60, deadline=None)
@given(
    mtu=st.sampled_from([256, 1024, 4096]),
    count=st.integers(2, 15),
    first_psn=st.integers(0, (1 << 24) - 1),
    opcodes=st.lists(st.sampled_from(OPCODES), min_size=15, max_size=15),
    ack_reqs=st.lists(st.booleans(), min_size=15, max_size=15),
    last_payload=st.one_of(st.none(), st.integers(1, 255)),
    qpn=st.integers(1, (1 << 24) - 1),
)
def test_fast_layout_equals_transport_layout(
    mtu, count, first_psn, opcodes, ack_reqs, last_payload, qpn
) -> None:
    packets = [
        DataPacket(qpn, (first_psn + i) & 0xFFFFFF, opcodes[i], ack_reqs[i], mtu)
        for i in range(count)
    ]
    if last_payload is not None:
        packets[-1] = DataPacket(qpn, packets[-1].psn, Opcode.SEND_LAST, True, last_payload)
    icrc = IcrcContext(ADDRESS)
    ours = bytearray(70000)
    theirs = bytearray(70000)
    used, segment = GsoWriter(icrc, 64).layout(ours, packets)
    used2, segment2 = layout_gso(theirs, packets, icrc, ip_id_first=0)
    assert (used, segment) == (used2, segment2)
    assert ours[:used] == theirs[:used]


def test_payload_and_reth_packets_take_the_transport_path() -> None:
    icrc = IcrcContext(ADDRESS)
    packets = [
        DataPacket(5, 0, Opcode.WRITE_FIRST, False, 256, 0, None, 0, 0, 1024),
        DataPacket(5, 1, Opcode.WRITE_MIDDLE, False, 256, 0, bytes(range(256))),
    ]
    ours, theirs = bytearray(4096), bytearray(4096)
    for batch in ([packets[0]], [packets[1], packets[1]]):
        used, _ = GsoWriter(icrc, 64).layout(ours, batch)
        used2, _ = layout_gso(theirs, batch, icrc, ip_id_first=0)
        assert ours[:used] == theirs[:used2]
