"""Packet captures in the run's timescale: pcap files whose timestamps are target time since the
replay's start, with nanosecond resolution (a microsecond of wall time is a nanosecond of target
time at a TDF of 1000).

pcap is libpcap's file format (tcpdump.org/manpages/pcap-savefile.5.html): a 24-byte header
(magic, version 2.4, snap length, link type) and per packet a 16-byte header (seconds, sub-
seconds, captured and original length). Magic 0xa1b2c3d4 counts microseconds, 0xa1b23c4d
nanoseconds; either byte order.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
LINKTYPE_IPV4 = 228  # raw IPv4, no link header (the simulator's frames)
HEADER = struct.Struct("<IHHiIII")
RECORD = struct.Struct("<IIII")


@dataclass(frozen=True)
class Packet:
    time_s: float
    data: bytes
    original_bytes: int


def read_pcap(data: bytes) -> tuple[int, int, list[Packet]]:
    """(link type, snap length, packets) of a pcap file; ValueError if it is not one."""
    if len(data) < 24:
        raise ValueError("not a pcap file: shorter than its header")
    (magic,) = struct.unpack_from("<I", data)
    order = "<"
    if magic not in (MAGIC_US, MAGIC_NS):
        (magic,) = struct.unpack_from(">I", data)
        order = ">"
        if magic not in (MAGIC_US, MAGIC_NS):
            raise ValueError(f"not a pcap file: magic {magic:#x}")
    scale = 1e-9 if magic == MAGIC_NS else 1e-6
    _, _, _, _, _, snap, link = struct.unpack_from(order + "IHHiIII", data)
    record = struct.Struct(order + "IIII")
    packets = []
    offset = 24
    while offset + 16 <= len(data):
        sec, frac, caplen, origlen = record.unpack_from(data, offset)
        offset += 16
        packets.append(Packet(sec + frac * scale, data[offset : offset + caplen], origlen))
        offset += caplen
    return link, snap, packets


def write_pcap(packets: Iterator[Packet] | list[Packet], *, link: int, snap: int) -> bytes:
    """A nanosecond pcap file (little-endian) of the packets."""
    out = [HEADER.pack(MAGIC_NS, 2, 4, 0, 0, snap, link)]
    for p in packets:
        ns = max(0, round(p.time_s * 1e9))
        out.append(
            RECORD.pack(ns // 1_000_000_000, ns % 1_000_000_000, len(p.data), p.original_bytes)
        )
        out.append(p.data)
    return b"".join(out)


def to_target_time(data: bytes, *, wall_origin_s: float, tdf: float) -> bytes:
    """A capture stamped by the wall clock (tcpdump: the kernel's CLOCK_REALTIME), re-stamped in
    target time: (stamp - the replay's start) / TDF."""
    link, snap, packets = read_pcap(data)
    return write_pcap(
        [Packet((p.time_s - wall_origin_s) / tdf, p.data, p.original_bytes) for p in packets],
        link=link,
        snap=snap,
    )
