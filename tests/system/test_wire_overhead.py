"""A switch port charges what a frame takes on the wire, not only skb->len.

IEEE 802.3 puts 24 bytes on the wire beyond the frame the kernel holds (FCS 4, preamble and SFD
8, inter-frame gap 12). The engine's pacer and the simulator charge them; this checks the two
kernel pieces of an emulated port do too:
- HTB with `overhead 24` (net/sched/sch_generic.c, psched_l2t_ns adds the ratespec's overhead to
  each packet's length): a backlogged class passes (len + 24) x packets at its rate. Small
  frames make the difference large: 106 bytes in the kernel, 130 on the wire, 23% apart.
- The eBPF phantom queue grows by len + 24 per frame (phantom_marker.c).

Statistics: the HTB rate is taken from kernel receive timestamps over 2,000 back-to-back packets
(the first 100 skipped: HTB's burst lets them through early), so scheduling noise in the test's
own threads does not enter it; a 3% bound separates the two laws by 7x.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from emulator.engine.testbed import PairInfo
from fabrics.ecn import ebpf
from fabrics.ecn.markers import EbpfMarker
from fabrics.iproute import Cmd, run
from fabrics.queues import (
    ETH_HEADER_BYTES,
    WIRE_OVERHEAD_BYTES,
    EcnThresholds,
    EgressPort,
    drop_tail,
    htb_commands,
)
from tests.system.conftest import SO_RCVBUFFORCE, udp_socket

pytestmark = pytest.mark.system

PAYLOAD_BYTES = 64
FRAME_BYTES = ETH_HEADER_BYTES + 20 + 8 + PAYLOAD_BYTES  # skb->len at the sender's egress
HTB_RATE_BPS = 4e6
PACKETS = 2_100
SKIPPED = 100
RATE_BOUND = 0.03
PORT = 5301
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def _receive(sock: socket.socket, stamps: list[int], deadline: float) -> None:
    while len(stamps) < PACKETS and time.monotonic() < deadline:
        try:
            _, ancillary, _, _ = sock.recvmsg(2048, 64)
        except TimeoutError:
            continue
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("=qq", data[:16])
                stamps.append(sec * 1_000_000_000 + nsec)


def test_htb_and_the_phantom_queue_charge_preamble_gap_and_fcs(veth_pair: PairInfo) -> None:
    p = veth_pair
    assert WIRE_OVERHEAD_BYTES == 4 + 8 + 12  # IEEE 802.3: FCS, preamble + SFD, gap
    shaped = EgressPort("a", p.sender_ns, p.sender_if, HTB_RATE_BPS, 4_000_000, 1500, 0.0, None)
    for cmd in htb_commands(shaped, drop_tail(shaped)):
        run(cmd)
    # The phantom queue drains at 1 kb/s: over this test it drains under 200 bytes, so what it
    # holds is what it was charged.
    never_marks = EcnThresholds(10**9, 2 * 10**9, 0.0)
    phantom = EgressPort("a", p.sender_ns, p.sender_if, 1e3, 10**9, 1500, 0.0, never_marks)
    marker = EbpfMarker()
    for cmd in marker.attach(phantom)[0]:
        run(cmd)
    try:
        marker.configure([phantom])
        maps = marker.maps[(phantom.netns, phantom.dev)]
        before = ebpf.read_state(maps)
        rx, tx = udp_socket(p.receiver_ns, 0), udp_socket(p.sender_ns, 0)
        with rx, tx:
            rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            rx.settimeout(0.2)
            rx.bind((p.receiver_addr, PORT))
            stamps: list[int] = []
            expected_s = PACKETS * (FRAME_BYTES + WIRE_OVERHEAD_BYTES) * 8 / HTB_RATE_BPS
            receiver = threading.Thread(
                target=_receive, args=(rx, stamps, time.monotonic() + 10 * expected_s + 5)
            )
            receiver.start()
            payload = bytes(PAYLOAD_BYTES)
            for _ in range(PACKETS):
                tx.sendto(payload, (p.receiver_addr, PORT))
            receiver.join()
        after = ebpf.read_state(maps)
    finally:
        run(Cmd("tc", ("qdisc", "del", "dev", phantom.dev, "clsact"), phantom.netns))

    assert len(stamps) == PACKETS, f"{len(stamps)} of {PACKETS} datagrams arrived"
    span_ns = stamps[-1] - stamps[SKIPPED]
    wire_bps = (PACKETS - 1 - SKIPPED) * (FRAME_BYTES + WIRE_OVERHEAD_BYTES) * 8e9 / span_ns
    frame_bps = wire_bps * FRAME_BYTES / (FRAME_BYTES + WIRE_OVERHEAD_BYTES)
    packets = after.packets - before.packets
    charged = after.queue_bytes - before.queue_bytes
    frames = after.tx_bytes - before.tx_bytes
    line = (
        f"HTB at {HTB_RATE_BPS / 1e6:.1f} Mb/s passed {wire_bps / 1e6:.3f} Mb/s counting wire "
        f"bytes ({frame_bps / 1e6:.3f} counting skb->len); phantom queue charged {charged} bytes "
        f"for {packets} packets of {frames} bytes"
    )
    print(line)
    assert wire_bps == pytest.approx(HTB_RATE_BPS, rel=RATE_BOUND), line
    assert packets >= PACKETS, line
    # every packet through the port (ours, and any the namespace sent) is charged len + 24
    assert frames + packets * WIRE_OVERHEAD_BYTES - 200 <= charged, line
    assert charged <= frames + packets * WIRE_OVERHEAD_BYTES, line
