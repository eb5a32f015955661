"""Per-packet entropy: each packet's source port by PSN, the home port ACKs use, the ICRC for
each port (against scapy), and a burst cut into the datagrams the engine sends one by one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP

from emulator.transport.burst import Burst
from emulator.transport.entropy import entropy_sport, home_sport
from emulator.transport.packets import DataPacket, Opcode
from emulator.transport.wire import FlowAddress, ipv4_packet


def test_ports_in_turn_by_psn_wrapping_in_the_dynamic_range() -> None:
    assert [entropy_sport(50000, psn, 4) for psn in range(6)] == [
        50000,
        50001,
        50002,
        50003,
        50000,
        50001,
    ]
    assert [entropy_sport(65534, psn, 4) for psn in range(4)] == [65534, 65535, 49152, 49153]
    # a port below the dynamic range: its values are in the range (value 0 is not itself)
    assert entropy_sport(1000, 0, 4) == 49152 + (1000 - 49152) % 16384


@given(base=st.integers(1, 65535), psn=st.integers(0, (1 << 24) - 1), values=st.integers(2, 256))
def test_home_port_is_value_zero_whatever_packet_it_is_found_from(
    base: int, psn: int, values: int
) -> None:
    sport = entropy_sport(base, psn, values)
    assert 49152 <= sport <= 65535
    assert home_sport(sport, psn, values) == entropy_sport(base, 0, values)


def test_each_ports_packet_carries_the_icrc_for_its_own_port() -> None:
    for psn in range(3):
        sport = entropy_sport(50000, psn, 16)
        packet = DataPacket(9, psn, int(Opcode.SEND_MIDDLE), False, 256)
        wire = ipv4_packet(packet, FlowAddress("10.0.0.1", "10.0.1.1", sport), ip_id=0)
        parsed = IP(wire)
        assert parsed[UDP].sport == sport
        again = parsed.copy()
        again[BTH].icrc = None  # scapy computes it over this packet's own UDP header
        assert IP(raw(again))[BTH].icrc == parsed[BTH].icrc


def test_a_burst_split_is_the_same_segments_one_per_datagram() -> None:
    burst = Burst(
        dest_qp=5,
        psn=(1 << 24) - 2,  # wraps
        count=4,
        segment_bytes=4112,
        payload_bytes=4096,
        last_payload_bytes=100,
        opcodes=bytes([1, 1, 1, 2]),
        ack_req_at=[1, 3],
        tag=0,
        tags=bytes([3, 3, 4, 4]),
    )
    parts = burst.split()
    assert [p.count for p in parts] == [1, 1, 1, 1]
    assert [q for p in parts for q in p.to_packets()] == burst.to_packets()
    assert [p.tag for p in parts] == [3, 3, 4, 4]
    assert [p.wire_bytes for p in parts] == [4112, 4112, 4112, burst.last_segment_bytes]
    assert sum(p.wire_bytes for p in parts) == burst.wire_bytes
