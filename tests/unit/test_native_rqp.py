"""A receive queue pair whose common path the C fabric takes (emulator/native/simfab_rqp.c, with
emulator/sim/native_rqp.py folding what it took into the Python receiver) against the Python
receiver alone (emulator/transport/receiver.py): for any arrival order (loss, duplicates, swaps,
CE marks, AckReq anywhere, messages of one or many packets, both reliabilities), each packet gets
the same replies and events, and the receivers end in the same state. The whole simulator with it
against the Python fabric is tests/integration/test_sim_native.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.sim import native
from emulator.sim.native_rqp import ReceiveOffload, data_flags_table
from emulator.transport.dcqcn_params import DcqcnParams
from emulator.transport.events import CnpSent, TransportEvent
from emulator.transport.packets import (
    AETH_ACK,
    PSN_MASK,
    AckPacket,
    CnpPacket,
    DataPacket,
    Opcode,
    Packet,
)
from emulator.transport.params import TransportParams
from emulator.transport.receiver import ReceiveQueuePair

MODULE, WHY_NOT = native.load_module()
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native simfab absent: {WHY_NOT}")
QPN, HOST = 7, 3


def stream(draw: Any, first_psn: int) -> list[DataPacket]:
    """A sender's packets in order: messages of 1..6 packets, AckReq where the draw says."""
    packets: list[DataPacket] = []
    psn = first_psn
    for _ in range(draw(st.integers(1, 6))):
        n = draw(st.integers(1, 6))
        for k in range(n):
            if n == 1:
                op = Opcode.SEND_ONLY
            else:
                op = Opcode.SEND_FIRST if k == 0 else Opcode.SEND_LAST if k == n - 1 else 1
            ack = draw(st.booleans()) if k < n - 1 else True
            size = 1024 if k < n - 1 else draw(st.integers(1, 1024))
            packets.append(DataPacket(QPN, psn, int(op), ack, size))
            psn = (psn + 1) & PSN_MASK
    return packets


@st.composite
def arrivals(draw: Any) -> tuple[list[tuple[DataPacket, bool]], str]:
    """Packets as a fabric might deliver them (each with its CE mark), and the reliability."""
    first_psn = draw(st.sampled_from([0, 100, PSN_MASK - 3]))  # across the 24-bit wrap too
    sent = stream(draw, first_psn)
    out: list[DataPacket] = []
    window = TransportParams().window_packets
    for packet in sent:
        fate = draw(st.sampled_from(["keep"] * 6 + ["lose", "twice", "swap", "stray"]))
        if fate == "twice":
            out += [packet, packet]
        elif fate == "stray":  # and one from far ahead, out of the window (it moves highest)
            far = (packet.psn + window + draw(st.integers(0, 9))) & PSN_MASK
            out += [replace(packet, psn=far), packet]
        elif fate == "swap" and out:
            out.insert(len(out) - 1, packet)
        elif fate == "keep":
            out.append(packet)
    # the sender goes back: the whole stream again from some point (go-back-N's resend)
    resend_from = draw(st.integers(0, len(sent)))
    out += sent[resend_from:]
    ce = [draw(st.booleans()) if draw(st.integers(0, 9)) == 0 else False for _ in out]
    reliability = draw(st.sampled_from(["go_back_n", "selective"]))
    return list(zip(out, ce, strict=True)), reliability


def state(r: ReceiveQueuePair) -> dict[str, Any]:
    skip = ("events", "notification_point", "on_recording")
    s = {k: v for k, v in vars(r).items() if k not in skip}
    s["notification_point"] = dict(vars(r.notification_point))
    s["events"] = list(r.events)
    return s


@needs_native
@settings(max_examples=300, deadline=None)
@given(arrivals(), st.booleans(), st.booleans(), st.sampled_from([0.0, 1.5, 4.0, 50.0]))
def test_the_c_common_path_leaves_the_python_receivers_state(
    case: tuple[list[tuple[DataPacket, bool]], str],
    answers: bool,
    marks: bool,
    cnp_gap_us: float,
) -> None:
    """`answers`: C answers the packets that ask for an ACK (as with a host to send from);
    `marks`: and CE-marked ones with its notification point (as with the replay's events to
    raise CnpSent into), one CNP per `cnp_gap_us` at most (packets arrive 1 us apart)."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    fab = ffi.gc(lib.fab_new(1, 0, 0, 0), lib.fab_free)
    packets, reliability = case
    params = TransportParams(
        reliability=reliability,  # type: ignore[arg-type]
        dcqcn=DcqcnParams(min_time_between_cnps_us=cnp_gap_us),
    )
    first = packets[0][0].psn if packets else 0
    ours_events: list[TransportEvent] = []
    plain = ReceiveQueuePair(qpn=QPN, remote_qp=QPN, params=params, initial_psn=first)
    ours = ReceiveQueuePair(
        qpn=QPN, remote_qp=QPN, params=params, initial_psn=first, events=ours_events
    )
    offload = ReceiveOffload(ffi, lib, fab)
    assert offload.take(HOST, ours)
    slot = lib.fab_rqp(fab, QPN)
    slot.ack_ready = int(answers)
    slot.cnp_ready = int(marks)  # what ReceiveOffload.take sets for a host with bound events
    slot.cnp_interval_s = ours.notification_point.interval_s
    flags = data_flags_table(lib)
    taken = answered = marked = 0
    for i, (packet, ce) in enumerate(packets):
        now = i * 1e-6
        expected = plain.on_data(now=now, packet=packet, ce=ce)
        events_before = len(ours_events)
        took = lib.fab_rqp_offer(
            fab,
            QPN,
            HOST,
            packet.psn,
            flags[packet.opcode] | packet.ack_req,
            ce,
            packet.payload_bytes,
            now,
        )
        assert took >= 0
        if took:
            assert took & lib.RQP_TOOK
            taken += 1
            marked += ce
            replies: list[Packet] = []
            if took & lib.RQP_CNP:  # simfab.c raises CnpSent and sends the CNP first
                ours_events.append(CnpSent(QPN, now))
                replies.append(CnpPacket(QPN))
            if took & lib.RQP_ACK:  # the ACK simfab.c rqp_reply builds from the slot
                answered += 1
                psn = (lib.fab_rqp(fab, QPN).expected_psn - 1) & PSN_MASK
                replies.append(AckPacket(QPN, psn, AETH_ACK, lib.fab_rqp(fab, QPN).msn))
        else:
            offload.read(QPN)
            replies = ours.on_data(now=now, packet=packet, ce=ce)
            offload.write(QPN)
        assert replies == expected, (i, packet)
        assert ours_events[events_before:] == plain.events[events_before:], (i, packet)
    offload.read_all()
    assert state(ours) == state(plain)
    # a packet the common path took is one that needed nothing from Python (no event, and no
    # reply but an ACK when C answers, and a CNP when it marks)
    assert taken - answered <= sum(1 for p, ce in packets if (marks or not ce) and not p.ack_req)
    assert answers or not answered
    assert marks or not marked


@needs_native
def test_in_order_middles_are_taken_and_everything_else_is_not() -> None:
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    fab = ffi.gc(lib.fab_new(1, 0, 0, 0), lib.fab_free)
    r = ReceiveQueuePair(qpn=QPN, remote_qp=QPN, params=TransportParams())
    offload = ReceiveOffload(ffi, lib, fab)
    assert offload.take(HOST, r)
    first, middle, last = lib.DATA_FIRST, 0, lib.DATA_LAST

    def offer(psn: int, data_flags: int, *, ce: bool = False, host: int = HOST) -> int:
        return int(lib.fab_rqp_offer(fab, QPN, host, psn, data_flags, ce, 1000, 0.0))

    assert offer(0, first) == 1  # a FIRST opens a message
    assert offer(1, middle) == 1
    assert offer(2, middle, host=HOST + 1) == 0  # another host's packet of that number
    assert offer(2, middle, ce=True) == 0  # a CE mark: the notification point decides
    assert offer(2, middle | lib.DATA_ACK_REQ) == 0  # an ACK to send, and no host to send it
    assert offer(3, middle) == 0  # ahead of the expected PSN
    assert offer(2, first) == 0  # a FIRST inside a message: malformed, Python drops it
    assert offer(2, last) == 0  # the end of a message: an event
    assert offer(2, middle) == 1
    offload.read_all()
    assert (r.packets_received, r.delivered_bytes, r.expected_psn) == (3, 3000, 3)
    # a receiver recording its deliveries gets every packet (switched on after it was taken)
    r.deliveries = []
    assert offer(3, middle) == 0
    r.on_data(now=0.0, packet=DataPacket(QPN, 3, Opcode.SEND_MIDDLE, False, 1000), ce=False)
    assert [offset for _, offset, _ in r.deliveries] == [3000]
    r.deliveries = None
    assert offer(4, middle) == 1
    # a second receiver of the same number on another host: neither is taken from then on
    other = ReceiveQueuePair(qpn=QPN, remote_qp=QPN, params=TransportParams())
    assert not offload.take(HOST + 1, other)
    assert offer(3, middle) == 0
    assert QPN not in offload.receivers


@needs_native
def test_a_receiver_taken_before_the_table_grew_is_still_in_step() -> None:
    """The C table moves when a higher QP number arrives: the Python side holds no pointer into
    it (a 3-tier run with thousands of queue pairs once crashed on one)."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    fab = ffi.gc(lib.fab_new(1, 0, 0, 0), lib.fab_free)
    offload = ReceiveOffload(ffi, lib, fab)
    first = ReceiveQueuePair(qpn=QPN, remote_qp=QPN, params=TransportParams())
    assert offload.take(HOST, first)
    for qpn in range(QPN + 1, 5000):  # the table doubles several times
        assert offload.take(
            HOST, ReceiveQueuePair(qpn=qpn, remote_qp=qpn, params=TransportParams())
        )
    # in step after the growth: the FIRST goes through Python, which writes its state back
    packet = DataPacket(QPN, 0, Opcode.SEND_FIRST, True, 1000)
    assert (
        lib.fab_rqp_offer(fab, QPN, HOST, 0, lib.DATA_FIRST | lib.DATA_ACK_REQ, 0, 1000, 0.0) == 0
    )
    offload.read(QPN)
    first.on_data(now=0.0, packet=packet, ce=False)
    offload.write(QPN)
    assert lib.fab_rqp_offer(fab, QPN, HOST, 1, 0, 0, 1000, 0.0) == 1
    offload.read_all()
    assert (first.packets_received, first.delivered_bytes, first.expected_psn) == (2, 2000, 2)


@needs_native
def test_a_ce_mark_is_answered_in_c_once_the_host_can_send_its_cnp() -> None:
    """One CNP per min_time_between_cnps (dcqcn.py NotificationPoint), the receiver's counts
    and its notification point's state folded in, and that state written back to C."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    fab = ffi.gc(lib.fab_new(1, 0, 0, 0), lib.fab_free)
    params = TransportParams(dcqcn=DcqcnParams(min_time_between_cnps_us=4.0))
    r = ReceiveQueuePair(qpn=QPN, remote_qp=QPN, params=params)
    offload = ReceiveOffload(ffi, lib, fab)
    assert offload.take(HOST, r)
    slot = lib.fab_rqp(fab, QPN)
    slot.cnp_ready, slot.cnp_interval_s = 1, r.notification_point.interval_s
    took, cnp = lib.RQP_TOOK, lib.RQP_TOOK | lib.RQP_CNP

    def offer(psn: int, data_flags: int, now_us: float) -> int:
        return int(lib.fab_rqp_offer(fab, QPN, HOST, psn, data_flags, 1, 1000, now_us * 1e-6))

    assert offer(0, lib.DATA_FIRST, 0.0) == cnp  # the first mark: a CNP
    assert offer(1, 0, 3.0) == took  # within 4 us of it: none
    assert offer(2, 0, 4.0) == cnp  # 4 us on: the next
    assert offer(3, lib.DATA_ACK_REQ, 9.0) == 0  # no host to send the ACK from: Python's
    offload.read(QPN)
    assert (r.packets_received, r.ce_packets, r.cnps_sent) == (3, 3, 2)
    assert r.notification_point.last_cnp_s == 4e-6
    # Python takes the next one (its ACK) and its CNP; C then goes on from Python's state
    replies = r.on_data(
        now=9e-6, packet=DataPacket(QPN, 3, Opcode.SEND_MIDDLE, True, 1000), ce=True
    )
    assert [type(p).__name__ for p in replies] == ["CnpPacket", "AckPacket"]
    offload.write(QPN)
    assert slot.last_cnp_s == 9e-6
    assert offer(4, 0, 12.0) == took
    assert offer(5, 0, 13.0) == cnp
