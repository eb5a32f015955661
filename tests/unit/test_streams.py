"""Stateless streams (emulator.transport.stream, the scenario's `streams:`): the schedule a
tester's rate gives, the signature on the wire as scapy reads it, what the receiver counts, and
the scenario's refusals naming the key."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.traffic.streams import DRAIN_S, StreamSpec, check_streams, streams_end_s
from emulator.transport.stream import (
    MAGIC,
    STAMP_BYTES,
    StreamSink,
    StreamSource,
    frame_interval_s,
    stream_result,
)
from emulator.transport.wire import FlowAddress, ipv4_udp_packet


def test_a_percent_of_line_rate_counts_preamble_and_gap() -> None:
    # 64-byte frames at 100% of 10 Gb/s: 14.88 Mpps, the Ethernet line rate (RFC 2544's table:
    # 84 bytes of wire per minimum frame)
    spec = StreamSpec(name="s", src=0, dst=1, frame_bytes=64, rate_percent=100.0, packets=10)
    assert 1 / spec.interval_s(10e9) == pytest.approx(14_880_952, rel=1e-6)
    assert frame_interval_s(1518, 1e9) == pytest.approx(1538 * 8 / 1e9)
    # a duration holds the frames that start in it, the first at its start
    timed = StreamSpec(
        name="t", src=0, dst=1, frame_bytes=1000, rate_pps=1e6, duration_us=10.0, start_us=5.0
    )
    source = timed.source(0, 100e9)
    assert source.packets == 10 and source.start_s == pytest.approx(5e-6)
    assert source.end_s == pytest.approx(14e-6)
    assert streams_end_s((spec, timed), 100e9) == pytest.approx(14e-6 + DRAIN_S)


def test_the_source_releases_on_schedule_cycling_its_ports() -> None:
    source = StreamSource(3, 128, 1e-6, 0.0, 5, (5000, 5001))
    assert source.next_due_s() == 0.0
    first = source.poll(0.0)
    assert [p for p, _ in first] == [5000]
    # 2.5 us later: the frames due at 1 and 2 us leave, stamped with now; the first counts
    # as late only past the limit (10 us)
    second = source.poll(2.5e-6)
    assert [p for p, _ in second] == [5001, 5000]
    assert source.late_packets == 0 and source.late_s_max == pytest.approx(1.5e-6)
    magic, index, seq, sent_ns = struct.unpack("!HHIQ", second[1][1])
    assert (magic, index, seq, sent_ns) == (MAGIC, 3, 2, 2500)
    late = source.poll(20e-6)
    assert len(late) == 2 and source.done and source.next_due_s() is None
    assert source.late_packets == 2 and source.late_s_max == pytest.approx(17e-6)


def test_the_signature_on_the_wire_as_scapy_reads_it() -> None:
    from scapy.layers.inet import IP, UDP

    source = StreamSource(7, 100, 1e-6, 0.0, 1, (6000,))
    ((sport, head),) = source.poll(0.0)
    payload = head + bytes(source.payload_bytes - len(head))
    address = FlowAddress("10.0.0.1", "10.0.0.2", sport, 7000, dscp=3, ecn=2)
    packet = IP(ipv4_udp_packet(address, payload, ip_id=9))
    assert packet[IP].tos == 3 << 2 | 2 and packet[IP].len == 100 - 18
    assert (packet[UDP].sport, packet[UDP].dport) == (6000, 7000)
    assert bytes(packet[UDP].payload)[:4] == bytes.fromhex("e75a0007")


def test_the_sink_counts_loss_reordering_ce_and_latency() -> None:
    source = StreamSource(0, 200, 1e-6, 0.0, 6, (1,))
    sent = [head for t in range(6) for _, head in source.poll(t * 1e-6)]
    sink = StreamSink(frozenset({0}))
    length = source.payload_bytes
    # frame 2 lost, 4 before 3, one CE; each arrives 500 ns after it left
    for seq, ecn in ((0, 2), (1, 2), (4, 3), (3, 2), (5, 2)):
        sink.on_datagram(seq * 1e-6 + 500e-9, sent[seq], ecn, length)
    sink.on_datagram(0.0, b"\x00" * 20, 0)  # no signature
    sink.on_datagram(0.0, struct.pack("!HHIQ", MAGIC, 9, 0, 0), 0)  # not a stream it knows
    assert sink.malformed == 2
    row = stream_result("s", source, sink.tallies[0])
    assert (row["frames_tx"], row["frames_rx"], row["frames_lost"]) == (6, 5, 1)
    assert row["loss_percent"] == pytest.approx(100 / 6)
    assert row["out_of_order"] == 1 and row["ce_rx"] == 1
    assert row["bytes_rx"] == 5 * 200 and row["bytes_tx"] == 6 * 200
    assert row["latency_ns"] == {"min": 500, "max": 500, "avg": 500}
    # 6 frames a microsecond apart: 5 intervals of 220 wire bytes
    assert row["tx_rate_bps"] == pytest.approx(220 * 8 / 1e-6)


def test_a_short_datagram_is_malformed_not_fatal() -> None:
    sink = StreamSink(frozenset({0}))
    sink.on_datagram(0.0, b"\xe7\x5a", 0)
    sink.on_datagram(0.0, struct.pack("!HHIQ", MAGIC, 0, 0, 0), 0, length=STAMP_BYTES - 1)
    assert sink.malformed == 2 and not sink.tallies


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("rate_percent: 50, rate_pps: 10, packets: 1", "give exactly one of rate_percent"),
        ("rate_percent: 50", "give exactly one of packets and duration_us"),
        ("rate_percent: 50, packets: 1, udp_dport: 4791", "udp_dport: 4791 is RoCEv2's port"),
        (
            "rate_percent: 50, packets: 1, udp_sport: 65535, udp_sport_count: 2",
            "udp_sport_count: the source ports run past 65535",
        ),
        ("rate_percent: 150, packets: 1", "rate_percent"),
        ("rate_percent: 50, packets: 1, frame_bytes: 60", "frame_bytes"),
    ],
)
def test_the_scenario_refuses_a_bad_stream_naming_the_key(
    tmp_path: Path, fields: str, message: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "fabric: {kind: clos, hosts_per_leaf: 2, leaves: 1, spines: 1}\n"
        f"streams:\n  - {{name: a, src: 0, dst: 1, {fields}}}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert "streams[0]" in str(info.value) and message in str(info.value)
    assert "\n" not in str(info.value)


def test_ranks_and_frame_sizes_are_checked_against_the_fabric() -> None:
    far = StreamSpec(name="a", src=0, dst=9, rate_pps=1.0, packets=1)
    with pytest.raises(ScenarioError, match=r"streams\[0\]\.dst: rank 9 is not on the fabric"):
        check_streams((far,), 4, None, "x.yaml")
    big = StreamSpec(name="b", src=0, dst=1, frame_bytes=9216, rate_pps=1.0, packets=1)
    with pytest.raises(ScenarioError, match=r"streams\[0\]\.frame_bytes: 9216 is more than"):
        check_streams((big,), 4, 1500, "x.yaml")
    check_streams((big,), 4, 9198, "x.yaml")


def test_a_scenario_of_streams_alone_needs_no_workload(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "fabric: {kind: clos, hosts_per_leaf: 2, leaves: 1, spines: 1}\n"
        "streams:\n  - {name: a, src: 0, dst: 1, rate_percent: 10, duration_us: 5}\n"
        "  - {name: a, src: 1, dst: 0, rate_percent: 10, duration_us: 5}\n"
    )
    with pytest.raises(ScenarioError, match="streams: two streams are named 'a'"):
        load_scenario(path)
    path.write_text(path.read_text().replace("name: a, src: 1", "name: b, src: 1"))
    assert [s.name for s in load_scenario(path).streams] == ["a", "b"]
