"""The eBPF marker's cost per packet, with its per-attribution-class counters against the same
program built without them (phantom_marker.c, PHANTOM_NO_CLASSES), measured in the same run.

Run as root from the repository root: `python -m bench.marker_cost [--seconds S] [--rounds N]`.

A veth pair; the marker at the sender's egress (tc clsact, as on a switch port) with a 1 Gb/s
phantom queue and DCQCN thresholds the offered load crosses (so marking runs too), fed RoCEv2
data frames (IPv4/UDP 4791, a BTH with an attribution tag, 1024 payload bytes, ECT(0)) two ways:

- in place: a raw AF_PACKET socket sends them to a MAC nobody has, flat out, for S seconds; the
  kernel's own BPF run-time statistics (BPF_ENABLE_STATS, released when the bench ends) give the
  program's mean time per packet, run_time_ns / run_cnt (the statistic adds two clock reads per
  run, the same to both programs);
- alone: BPF_PROG_TEST_RUN (`bpftool prog run ... repeat`) runs the program on one frame a
  million times and gives its mean duration (the figure fabrics/README.md quotes).

The two programs alternate N rounds; each figure is the median of its rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

from emulator.engine.testbed import NetnsBed, pair
from fabrics.ecn import bpf_syscall
from fabrics.ecn.markers import EbpfMarker
from fabrics.iproute import Cmd, in_netns, run
from fabrics.queues import EcnThresholds, EgressPort

BENCH = "marker_cost"
BPF_ENABLE_STATS = 32  # include/uapi/linux/bpf.h
BPF_STATS_RUN_TIME = 0
PAYLOAD_BYTES = 1024
RATE_BPS = 1e9


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


class _EnableStats(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32)]


def enable_run_time_stats() -> int:
    """An fd that keeps the kernel's BPF run-time statistics on until it is closed."""
    return bpf_syscall._bpf(BPF_ENABLE_STATS, _EnableStats(BPF_STATS_RUN_TIME))


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def rocev2_frame(src: str, dst: str, tag: int) -> bytes:
    """An Ethernet frame with an ECT(0) RoCEv2 SEND MIDDLE whose BTH carries `tag` (the ICRC
    is left zero: nothing on this path checks it)."""
    bth = struct.pack("!BBHII", 0x01, 0, 0xFFFF, tag << 24 | 7, 1)
    udp_payload = bth + bytes(PAYLOAD_BYTES) + bytes(4)
    udp = struct.pack("!HHHH", 49152, 4791, 8 + len(udp_payload), 0) + udp_payload
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0x02,
        20 + len(udp),
        0,
        0x4000,
        64,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + header + udp


def prog_stats(prog_id: int) -> tuple[int, int]:
    doc = json.loads(run(Cmd("bpftool", ("-j", "prog", "show", "id", str(prog_id)))))
    return int(doc.get("run_time_ns", 0)), int(doc.get("run_cnt", 0))


def test_run_ns(prog_id: int, frame_path: str, repeat: int) -> float:
    """The program's mean duration on one frame over `repeat` runs (BPF_PROG_TEST_RUN)."""
    out = run(
        Cmd(
            "bpftool",
            ("-j", "prog", "run", "id", str(prog_id), "data_in", frame_path, "repeat", str(repeat)),
        )
    )
    return float(json.loads(out)["duration"])


def one_round(
    port: EgressPort, classes: bool, seconds: float, frames: list[bytes], frame_path: str
) -> tuple[float, float]:
    """Mean ns per packet of the marker (with or without class counters): in place over
    `seconds` of frames, and alone on one frame (test run)."""
    marker = EbpfMarker(classes=classes)
    for cmd in marker.attach(port)[0]:
        run(cmd)
    try:
        [prog] = marker.configure([port])
        alone = test_run_ns(int(prog["id"]), frame_path, 1_000_000)
        with in_netns(port.netns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.bind((port.dev, 0))
            t0, n0 = prog_stats(int(prog["id"]))
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                for _ in range(64):
                    # the device queue full: the frame never reached tc (not counted either)
                    with contextlib.suppress(OSError):
                        sock.send(frames[i % len(frames)])
                    i += 1
            t1, n1 = prog_stats(int(prog["id"]))
        finally:
            sock.close()
    finally:
        run(Cmd("tc", ("qdisc", "del", "dev", port.dev, "clsact"), port.netns))
    return (t1 - t0) / max(n1 - n0, 1), alone


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per round and program")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.marker_cost needs root (network namespaces, BPF)", file=sys.stderr)
        return 2
    stats_fd = enable_run_time_stats()
    try:
        with NetnsBed() as bed, tempfile.TemporaryDirectory() as tmp:
            p = pair(bed)
            port = EgressPort(
                "a",
                p.sender_ns,
                p.sender_if,
                RATE_BPS,
                4_000_000,
                9000,
                0.0,
                EcnThresholds(kmin_bytes=20_000, kmax_bytes=400_000, pmax=0.2),
                xoff_bytes=1_000_000,
            )
            # two classes, as two collective types would interleave at a port
            frames = [rocev2_frame(p.sender_addr, p.receiver_addr, tag) for tag in (1, 2)]
            frame_path = os.path.join(tmp, "frame.bin")
            with open(frame_path, "wb") as f:
                f.write(frames[0])
            ours: list[tuple[float, float]] = []
            peer: list[tuple[float, float]] = []
            for _ in range(args.rounds):
                ours.append(one_round(port, True, args.seconds, frames, frame_path))
                peer.append(one_round(port, False, args.seconds, frames, frame_path))
    finally:
        os.close(stats_fd)
    for i, how in enumerate(("in_place", "test_run")):
        mine = statistics.median(r[i] for r in ours)
        theirs = statistics.median(r[i] for r in peer)
        emit(
            f"marker_ns_per_packet_{how}_with_class_counters (lower is better; ratio peer/ours)",
            mine,
            "ns/packet",
            peer="the same marker without class counters (PHANTOM_NO_CLASSES)",
            peer_value=round(theirs, 1),
            ratio=round(theirs / mine, 3),
            rounds=[round(r[i], 1) for r in ours],
            peer_rounds=[round(r[i], 1) for r in peer],
        )
        emit(f"class_counters_cost_ns_per_packet_{how}", mine - theirs, "ns/packet")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
