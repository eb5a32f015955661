"""Traffic that is not ours, sent at a rank during a run, is dropped and counted by reason and
changes nothing: forged CNPs do not lower the rate, forged ACKs and NAKs neither complete nor
rewind a message, forged data does not enter a receiver's sequence.

Two namespaces joined by a veth; the receiver's namespace also holds a forger address on the same
veth, which sends RoCEv2 packets for the real queue pairs (and for QPs that do not exist, and
random bytes) at both ranks' port 4791, and datagrams to ports nobody listens on, while a DCQCN
flow runs on an uncongested link. From the sender's own address (a raw socket, as a confused or
malicious process on the sending host could) come data packets for the real QP with PSNs outside
the receiver's window: the receiver drops them without a NAK.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from emulator.engine.coordinator import RunOutcome, run_plan
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.engine.testbed import NetnsBed, PairInfo, pair
from emulator.events import RateSample
from emulator.transport.packets import (
    AETH_NAK_PSN_SEQUENCE_ERROR,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
)
from emulator.transport.params import TransportParams
from emulator.transport.wire import (
    ROCEV2_UDP_PORT,
    FlowAddress,
    IcrcContext,
    encode,
    ipv4_packet,
)
from fabrics.iproute import in_netns
from tests.system.prereq import require

pytestmark = pytest.mark.system

FORGER = "10.77.0.66"
LINE_BPS = 200e6
SIZE = 20_000_000  # about 0.8 s at the line rate
SPORT = 50500
QPNS = range(1, 9)  # the engine numbers QPs from 1; the run has one


@pytest.fixture
def bed() -> Iterator[PairInfo]:
    if os.geteuid() != 0:
        require("system test needs root (network namespaces)")
    b = NetnsBed()
    try:
        p = pair(b)
        b.ns_run(p.receiver_ns, "ip", "addr", "add", f"{FORGER}/24", "dev", p.receiver_if)
        yield p
    finally:
        b.close()


def _forged(p: PairInfo) -> list[tuple[bytes, str]]:
    """(UDP payload, destination address): one round of hostile packets."""
    rng = random.Random(7)
    to_sender = IcrcContext(FlowAddress(FORGER, p.sender_addr, SPORT))
    to_receiver = IcrcContext(FlowAddress(FORGER, p.receiver_addr, SPORT))
    out: list[tuple[bytes, str]] = []
    for qpn in QPNS:
        out.append((encode(CnpPacket(qpn), to_sender), p.sender_addr))
        out.append((encode(AckPacket(qpn, 0xFFFF), to_sender), p.sender_addr))
        out.append(
            (encode(AckPacket(qpn, 0, AETH_NAK_PSN_SEQUENCE_ERROR), to_sender), p.sender_addr)
        )
        data = DataPacket(qpn, rng.randrange(1 << 24), Opcode.SEND_ONLY, True, 1000)
        out.append((encode(data, to_receiver), p.receiver_addr))
    out.append((encode(CnpPacket(0xABCDE), to_sender), p.sender_addr))  # no such QP
    for dst in (p.sender_addr, p.receiver_addr):
        out.append((rng.randbytes(rng.randrange(1, 12)), dst))  # shorter than a BTH
    return out


def _udp_no_ports(netns: str) -> int:
    """UdpNoPorts of a namespace: datagrams to a port no socket listens on (the kernel drops)."""
    with in_netns(netns), open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("NoPorts")])


def _run_under_fire(p: PairInfo) -> tuple[RunOutcome, int, int, int]:
    ranks = [
        RankEndpoint(0, p.sender_addr, p.sender_ns, line_rate_bps=LINE_BPS),
        RankEndpoint(1, p.receiver_addr, p.receiver_ns, line_rate_bps=LINE_BPS),
    ]
    flow = EngineFlow(id=1, src=0, dst=1, qp=0, udp_sport=SPORT, bytes=SIZE)
    transport = TransportParams(congestion_control="dcqcn", retransmit_timeout_s=0.1)
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["outcome"] = run_plan(ranks, [flow], transport=transport, engine=EngineParams())
        except BaseException as e:  # handed to the test thread
            result["error"] = e

    with in_netns(p.receiver_ns):
        forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    forger.bind((FORGER, SPORT))
    with in_netns(p.sender_ns):  # IPPROTO_RAW: we write the IP header (the sender's address)
        spoofer = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    from_peer = FlowAddress(p.sender_addr, p.receiver_addr, SPORT)
    far_psns = [
        ipv4_packet(DataPacket(1, psn, Opcode.SEND_ONLY, True, 64), from_peer, ip_id=0)
        for psn in (1 << 22, (1 << 24) - (1 << 22))  # far ahead, far behind
    ]
    packets = _forged(p)
    sent = spoofed = other_ports = 0
    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while thread.is_alive() and time.monotonic() < deadline:
            for payload, dst in packets:
                try:
                    forger.sendto(payload, (dst, ROCEV2_UDP_PORT))
                    sent += 1
                except OSError:  # a full socket buffer: send the rest next round
                    break
            with contextlib.suppress(OSError):
                forger.sendto(b"not for us", (p.sender_addr, ROCEV2_UDP_PORT + 1))
                other_ports += 1
            for wire in far_psns:
                with contextlib.suppress(OSError):
                    spoofer.sendto(wire, (p.receiver_addr, 0))
                    spoofed += 1
            time.sleep(0.01)
    finally:
        forger.close()
        spoofer.close()
        thread.join(timeout=30)
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    outcome = result["outcome"]
    assert isinstance(outcome, RunOutcome)
    return outcome, sent, spoofed, other_ports


def test_forged_and_foreign_packets_are_counted_and_change_nothing(bed: PairInfo) -> None:
    no_ports_before = _udp_no_ports(bed.sender_ns)
    outcome, sent, spoofed, other_ports = _run_under_fire(bed)
    rounds = sent // len(_forged(bed))
    assert rounds >= 10, f"only {rounds} rounds of hostile packets went out during the run"
    # the run's own results are those of a clean run
    done = outcome.finished[1]
    assert outcome.received_bytes[1] == SIZE
    assert done.cnps_received == 0 and done.ce_marks == 0  # forged CNPs never reached DCQCN
    assert done.retransmitted_packets == 0  # forged NAKs did not rewind it
    rates = [e.rate_bps for e in outcome.events if isinstance(e, RateSample)]
    assert all(r >= LINE_BPS for r in rates), f"the rate fell: {min(rates)}"
    counters = outcome.metadata["counters"]
    assert counters.get("go_back_n_nak", 0) == 0 and counters.get("go_back_n_timeout", 0) == 0
    # and every hostile packet that was read is counted by reason
    drops = outcome.metadata["drops"]
    # per round, for the real QP: CNP, ACK, NAK at the sender and data at the receiver
    assert drops.get("foreign_source", 0) >= 4 * rounds, drops
    assert drops.get("unknown_qpn", 0) + drops.get("cnp_unknown_qp", 0) >= rounds, drops
    assert drops.get("malformed", 0) >= rounds, drops
    # data for the real QP from its real peer, PSNs outside the window: dropped without a NAK
    # (those sent before the engine's sockets opened or after the run never reached it)
    assert spoofed >= 2 * 10 and drops.get("psn_out_of_window", 0) >= 2 * 10, (spoofed, drops)
    assert drops.get("out_of_sequence", 0) == 0  # not taken as a gap: no NAK went back
    # other UDP ports: no socket of ours, the kernel drops and counts them
    assert other_ports >= 10
    assert _udp_no_ports(bed.sender_ns) - no_ports_before >= other_ports
