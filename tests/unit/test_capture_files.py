"""Packet capture files (collectors/capture.py): pcap as libpcap defines it, read in either byte
order and resolution, and re-stamped from the wall clock into target time."""

from __future__ import annotations

import struct

import pytest

from collectors.capture import (
    LINKTYPE_ETHERNET,
    MAGIC_US,
    Packet,
    read_pcap,
    to_target_time,
    write_pcap,
)


def test_a_written_file_reads_back_with_nanoseconds() -> None:
    packets = [Packet(0.0, b"\x45" * 20, 20), Packet(1.000000123, b"ab", 1500)]
    data = write_pcap(packets, link=228, snap=96)
    assert struct.unpack_from("<IHHiIII", data) == (0xA1B23C4D, 2, 4, 0, 0, 96, 228)
    link, snap, back = read_pcap(data)
    assert (link, snap) == (228, 96)
    assert back[1].data == b"ab" and back[1].original_bytes == 1500
    assert back[1].time_s == pytest.approx(1.000000123, abs=1e-12)


def test_a_big_endian_microsecond_file_is_read_and_restamped_in_target_time() -> None:
    """tcpdump stamps the wall clock; at TDF 1000 one wall millisecond after the replay's start
    is one target microsecond."""
    header = struct.pack(">IHHiIII", MAGIC_US, 2, 4, 0, 0, 128, LINKTYPE_ETHERNET)
    record = struct.pack(">IIII", 1_700_000_000, 501_000, 3, 64) + b"xyz"
    target = to_target_time(header + record, wall_origin_s=1_700_000_000.5, tdf=1000.0)
    link, snap, (packet,) = read_pcap(target)
    assert (link, snap, packet.data, packet.original_bytes) == (LINKTYPE_ETHERNET, 128, b"xyz", 64)
    assert packet.time_s == pytest.approx(1e-6, abs=1e-12)


def test_not_a_pcap_file_is_refused() -> None:
    with pytest.raises(ValueError, match="not a pcap file"):
        read_pcap(b"\0" * 24)
    with pytest.raises(ValueError, match="shorter than its header"):
        read_pcap(b"\xd4\xc3\xb2\xa1")
