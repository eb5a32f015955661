"""A send queue pair's grant (emulator.transport.grant) against poll_transmit: from any state a
run of posts, sends, ACKs, NAKs, CNPs and timers leaves it in, the packets a fabric sends for the
grant at any times the grant allows (each at or after its pacing time, in order, stopping where the
controller would act), folded in, leave the queue pair, its controller and its events exactly as
poll_transmit at those times does; each of those poll_transmit calls hands out the packet the
grant describes, changes no rate and arms no timer earlier than the caller's.

What sends the granted packets here is this file's rendition of the C fabric's
(emulator/native/simfab_sqp.c send_granted); the C code itself is held to the Python host by the
whole simulator's results (tests/integration/test_sim_native.py, test_sim_send_offload.py).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from emulator.transport.grant import TIMER_SLACK_S, SendGrant, fold, grant
from emulator.transport.packets import (
    BTH_BYTES,
    ICRC_BYTES,
    PSN_MASK,
    RETH_BYTES,
    AckPacket,
)
from emulator.transport.params import TransportParams
from emulator.transport.sender import SendQueuePair

AETH_NAK = 0x60


def make_qp(draw: Any) -> SendQueuePair:
    dcqcn = draw(st.booleans())
    params = TransportParams(
        path_mtu_bytes=draw(st.sampled_from([256, 1024, 4096])),
        ack_every_packets=draw(st.integers(1, 20)),
        window_packets=draw(st.integers(1, 48)),
        congestion_control="dcqcn" if dcqcn else "none",
        reliability=draw(st.sampled_from(["go_back_n", "selective"])),
    )
    return SendQueuePair(
        qpn=5,
        dest_qp=9,
        params=params,
        line_rate_bps=draw(st.sampled_from([10e9, 100e9])),
        initial_psn=draw(st.sampled_from([0, PSN_MASK - 5])),
        verb=draw(st.sampled_from(["send", "write"])),
    )


@st.composite
def histories(draw: Any) -> tuple[SendQueuePair, float, float]:
    """A queue pair after a run of what can happen to one, the time, and the caller's armed
    timer for it."""
    qp = make_qp(draw)
    now = 0.0
    posted = 0
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["post", "send", "send", "send", "ack", "nak", "cnp", "timer"]))
        now += draw(st.sampled_from([0.0, 1e-7, 1e-6, 2e-5, 3e-4]))
        if op == "post" or posted == 0:
            size = draw(st.sampled_from([0, 1, 300, 4096, 5000, 20000, 70000]))
            qp.post_send(now=now, message_id=posted, size_bytes=size)
            posted += 1
        elif op == "send":
            due = qp.next_transmit_s()
            if due is not None:
                now = max(now, due)
                qp.poll_transmit(now=now)
        elif op in ("ack", "nak") and qp._next_seq > qp._una_seq:
            k = draw(st.integers(0, qp._next_seq - qp._una_seq - 1))
            psn = (qp._initial_psn + qp._una_seq + k) & PSN_MASK
            qp.on_ack(now=now, packet=AckPacket(9, psn, AETH_NAK if op == "nak" else 0x1F))
        elif op == "cnp":
            qp.on_cnp(now=now)
        elif op == "timer":
            deadline = qp.next_timer_s()
            if deadline is not None:
                now = max(now, deadline)
                qp.on_timer(now=now)
    if draw(st.booleans()):  # most grants follow a packet the host's own pull sent
        due = qp.next_transmit_s()
        if due is not None:
            now = max(now, due)
            qp.poll_transmit(now=now)
    choice = draw(st.sampled_from(["none", "next", "later", "earlier"]))
    deadline = qp.next_timer_s()
    armed = math.inf
    if deadline is not None and choice != "none":
        armed = {"next": deadline, "later": deadline + 1e-3, "earlier": deadline - 1e-4}[choice]
    return qp, now, armed


def shape(g: SendGrant, j: int) -> tuple[int, int, int]:
    """The j-th granted packet's position kind (first, middle, last, only), payload and paced
    bytes (sender.py _opcode, _describe; simfab_sqp.c describe)."""
    k = g.k + j
    n = min(g.mtu, g.message_bytes - k * g.mtu)
    if k == 0:
        kind = 3 if g.message_packets == 1 else 0
    else:
        kind = 2 if k == g.message_packets - 1 else 1
    udp = BTH_BYTES + (RETH_BYTES if g.reth[kind] else 0) + n + (-n & 3) + ICRC_BYTES
    return kind, n, udp + g.pace_overhead_bytes


def c_send(g: SendGrant, j: int, now: float, c: dict[str, Any]) -> dict[str, Any]:
    """simfab_sqp.c's send_granted for the j-th packet of grant g at `now` (c: its pacing and
    AckReq state): the packet's fields."""
    k = g.k + j
    kind, n, paced = shape(g, j)
    ack = j == c["ack_next"]
    if ack:
        c["ack_next"] += g.ack_every
    if j == g.granted - 1 and g.ack_last:
        ack = True
    c["last_tx_s"] = max(c["next_tx_s"], now - g.max_burst_s)
    c["last_tx_bits"] = paced * 8
    c["next_tx_s"] = c["last_tx_s"] + c["last_tx_bits"] / g.rate_bps
    c["paced"] += paced
    if ack:
        c["ack_k"], c["ack_sent_s"] = k, now
    return {
        "psn": (g.psn + j) & PSN_MASK,
        "opcode": g.opcodes[kind],
        "ack_req": ack,
        "payload_bytes": n,
        "offset_bytes": k * g.mtu,
    }


def state(qp: SendQueuePair) -> dict[str, Any]:
    """Everything a queue pair holds, its messages and controller by value."""
    out = {k: v for k, v in vars(qp).items() if k not in ("cc", "_msgs", "_board", "params")}
    out["_msgs"] = [vars(m) if hasattr(m, "__dict__") else _slots(m) for m in qp._msgs]
    out["cc"] = _deep(qp.cc)
    out["_board"] = None if qp._board is None else _deep(qp._board)
    return out


def _slots(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in type(obj).__slots__}


def _deep(obj: Any) -> Any:
    if hasattr(obj, "__dict__"):
        return {k: _deep(v) for k, v in vars(obj).items()}
    if hasattr(type(obj), "__slots__") and not isinstance(obj, (int, float, str, tuple)):
        return {k: _deep(getattr(obj, k)) for k in type(obj).__slots__}
    return obj


@settings(max_examples=600, deadline=None)
@given(histories(), st.data())
def test_granted_packets_folded_in_are_poll_transmit_at_their_times(
    history: tuple[SendQueuePair, float, float], data: Any
) -> None:
    qp, now, armed = history
    g = grant(qp, now=now, timer_armed_s=armed)
    ref = copy.deepcopy(qp)
    event("granted" if g.granted else "nothing granted")
    if g.granted == 0:
        assert g.after_idle == (qp.next_transmit_s() is None)
        return
    assert qp.next_transmit_s() == g.next_tx_s
    c = {
        "next_tx_s": g.next_tx_s,
        "last_tx_s": g.last_tx_s,
        "last_tx_bits": g.last_tx_bits,
        "ack_next": g.ack_next,
        "paced": 0,
        "ack_k": -1,
        "ack_sent_s": 0.0,
    }
    sent = 0
    t = now
    budget_used = 0
    for j in range(g.granted):
        # the NIC sends it at its pacing time or later (busy with others)
        t = max(t, c["next_tx_s"]) + data.draw(st.sampled_from([0.0, 0.0, 1e-9, 3e-7, 5e-5]))
        # where C stops: the controller would act (its timers, its byte counter)
        paced = shape(g, j)[2]
        if t + g.cc_slack_s >= g.cc_deadline_s or budget_used + paced >= g.byte_budget:
            break
        budget_used += paced
        events = len(ref.events)
        due = ref.next_transmit_s()
        assert due is not None and due <= t + 1e-12
        packet = ref.poll_transmit(now=t)
        assert packet is not None
        expected = c_send(g, j, t, c)
        got = {k: getattr(packet, k) for k in expected}
        assert got == expected, (j, got, expected)
        assert len(ref.events) == events, "a granted packet changed the rate or emitted an event"
        deadline = ref.next_timer_s()
        assert deadline is None or deadline >= armed - TIMER_SLACK_S, "it would arm a timer"
        sent += 1
    event("all sent" if sent == g.granted else "some sent" if sent else "none sent")
    if sent:
        fold(
            qp,
            count=sent,
            paced_bytes=c["paced"],
            ack_k=c["ack_k"],
            ack_sent_s=c["ack_sent_s"],
            last_tx_s=c["last_tx_s"],
            last_tx_bits=c["last_tx_bits"],
            next_tx_s=c["next_tx_s"],
        )
    assert state(qp) == state(ref)
    if sent == g.granted:
        assert g.after_idle == (ref.next_transmit_s() is None)
        if not g.after_idle:
            assert ref.next_transmit_s() == c["next_tx_s"]


def test_a_first_packet_after_everything_was_acknowledged_is_never_granted() -> None:
    qp = SendQueuePair(qpn=1, dest_qp=2, params=TransportParams(), line_rate_bps=100e9)
    qp.post_send(now=0.0, message_id=1, size_bytes=1 << 20)
    assert grant(qp, now=0.0, timer_armed_s=math.inf).granted == 0  # it moves the progress clock
    qp.poll_transmit(now=0.0)
    # no timer armed: the run stops short of its first AckReq (by the every-16th rule the
    # run's 15th), which would arm the retransmission timer
    g = grant(qp, now=0.0, timer_armed_s=math.inf)
    assert (g.granted, g.ack_next, g.ack_last, g.after_idle) == (14, 14, False, False)
    # with it armed (as a host does after the first AckReq), the run goes to the message's end
    g = grant(qp, now=0.0, timer_armed_s=0.004)
    assert g.granted == min(256 - 1, TransportParams().window_packets - 1) and g.ack_last


def test_a_grant_stops_short_of_the_controller_and_of_an_earlier_timer() -> None:
    params = TransportParams(congestion_control="dcqcn")
    qp = SendQueuePair(qpn=1, dest_qp=2, params=params, line_rate_bps=100e9)
    qp.post_send(now=0.0, message_id=1, size_bytes=1 << 20)
    qp.poll_transmit(now=0.0)
    qp.on_cnp(now=1e-6)  # the reaction point starts; its first cut starts the byte counter
    cut = qp.cc.next_deadline_s()
    assert cut is not None
    qp.on_timer(now=cut)
    qp.poll_transmit(now=max(cut, qp.pacing_due_s))
    now = qp.pacing_due_s
    g = grant(qp, now=now, timer_armed_s=qp.next_timer_s() or math.inf)
    deadline = qp.cc.next_deadline_s()
    assert deadline is not None and g.granted > 0 and g.cc_deadline_s == deadline
    assert 0 < g.byte_budget <= params.dcqcn.rpg_byte_reset_bytes
    # a timer armed earlier than any packet could bring it is fine; one later is not
    assert grant(qp, now=now, timer_armed_s=0.0).granted > 0
    assert grant(qp, now=now, timer_armed_s=deadline + 1.0).granted == 0
