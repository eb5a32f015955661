"""Grants: the new packets a send queue pair would hand out, one poll_transmit per pacing time,
with nothing but sending changing it, said ahead so that a fabric in C can send them itself
(emulator/native/simfab_sqp.c) and fold them in afterwards.

A granted run is the stretch of poll_transmit calls whose every step is foldable: new packets of
one message inside the window (no resend pending, no payload to carry), sent while the
congestion controller's timers and byte counter would not act (its `quiet` answer), none the
first after everything was acknowledged (that one moves the progress clock), and none that would
bring next_timer_s() below the caller's armed timer (the caller would schedule a timer). Each
step then changes only what `fold` writes back: the PSN cursor and AckReq bookkeeping
(`_take_new`), the pacing clock, the counters and the controller's byte count. So a fabric that
sends `count` of them at their due times and folds them in leaves the queue pair, its events and
its controller exactly as `count` poll_transmit calls at those times would
(tests/unit/test_transport_grant.py holds it to poll_transmit).

This is the sender's own logic written beside it (sender.py's private state is read and written
here, as poll_burst does inside the class), kept apart because only the simulator's C fabric
uses it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from emulator.transport.packets import PSN_MASK, RETH_OPCODES
from emulator.transport.sender import SendQueuePair

TIMER_SLACK_S = 1e-12  # a timer `slack` earlier than the armed one is scheduled (Host._arm_timer)


class SendGrant(NamedTuple):
    """`granted` new packets of message `message_id`, from its packet `k` (PSN `psn`) on.
    granted 0: nothing may be sent without Python, which says when it is due (next_tx_s) or that
    it has nothing to send (after_idle)."""

    granted: int
    message_id: int
    message_bytes: int
    message_packets: int
    k: int
    psn: int
    mtu: int
    opcodes: tuple[int, int, int, int]  # first, middle, last, only
    reth: tuple[bool, bool, bool, bool]  # whether each carries a RETH
    pace_overhead_bytes: int
    ack_next: int  # the first of the run with AckReq by the every-Nth rule (>= granted: none)
    ack_every: int
    ack_last: bool  # its last asks for an ACK (it ends the message or fills the window)
    after_idle: bool  # once sent, next_transmit_s() is None until something else happens
    next_tx_s: float
    last_tx_s: float
    last_tx_bits: int
    max_burst_s: float
    rate_bps: float
    cc_deadline_s: float  # nothing sent at or after this minus cc_slack_s
    cc_slack_s: float
    byte_budget: int  # the run's paced bytes stay below this


class Decision(NamedTuple):
    """What `decide` found: `granted` packets of message `message` (None: none granted), the
    first with AckReq by the every-Nth rule, whether the last asks for one, whether the queue
    pair then has nothing to send, and its controller's quiet() bounds (granted > 0 only)."""

    granted: int
    message: Any
    ack_next: int
    ack_last: bool
    after_idle: bool
    quiet: tuple[float, float, int]


NOTHING = Decision(0, None, 0, False, False, (math.inf, 0.0, 0))


def decide(qp: SendQueuePair, *, now: float, timer_armed_s: float) -> Decision:
    """grant's decision alone, without describing the queue pair (what a fabric that reads the
    rest from the queue pair itself needs: emulator/sim/native_sqp.py); granted 0: NOTHING."""
    quiet = qp.cc.quiet()
    if (
        quiet is None
        or qp._resend_seq is not None
        or (qp._board is not None and qp._board.resend_pending(qp._una_seq))
        or qp._seg >= len(qp._msgs)
        or qp._next_seq == qp._una_seq
    ):
        return NOTHING
    m = qp._msgs[qp._seg]
    room = qp._window - (qp._next_seq - qp._una_seq)
    if m.payload is not None or room <= 0:
        return NOTHING
    count = min(m.packets - m.sent, room)
    if not count:
        return NOTHING
    ack_next = qp._ack_every - 1 - qp._since_ack_req
    ends_message = m.sent + count == m.packets
    fills_window = qp._next_seq + count - qp._una_seq >= qp._window
    if not _timer_stays(qp, now, timer_armed_s, count, ack_next, ends_message or fills_window):
        # the packets before the run's first AckReq (by the every-Nth rule, else its last)
        # leave the retransmission deadline alone
        count = ack_next if ack_next < count else count - 1
        ends_message = fills_window = False  # that run ends short of both
        if not count or not _timer_stays(qp, now, timer_armed_s, count, count, False):
            return NOTHING
    seg_after = qp._seg + (1 if ends_message else 0)
    after_idle = not (seg_after < len(qp._msgs) and not fills_window)
    return Decision(count, m, ack_next, ends_message or fills_window, after_idle, quiet)


def grant(qp: SendQueuePair, *, now: float, timer_armed_s: float) -> SendGrant:
    """What `qp` may have sent for it from `now` on; `timer_armed_s`: the caller's timer for it
    (inf: none), which no granted packet may undercut."""
    d = decide(qp, now=now, timer_armed_s=timer_armed_s)
    count, m = d.granted, d.message
    after_idle = d.after_idle if count else qp.next_transmit_s() is None
    quiet = qp.cc.quiet()
    deadline, slack, budget = quiet if quiet is not None else (math.inf, 0.0, 0)
    ops = opcodes(qp)
    return SendGrant(
        granted=count,
        message_id=m.message_id if m is not None else -1,
        message_bytes=m.size_bytes if m is not None else 0,
        message_packets=m.packets if m is not None else 0,
        k=m.sent if m is not None else 0,
        psn=next_psn(qp),
        mtu=qp._mtu,
        opcodes=ops,
        reth=(
            ops[0] in RETH_OPCODES,
            ops[1] in RETH_OPCODES,
            ops[2] in RETH_OPCODES,
            ops[3] in RETH_OPCODES,
        ),
        pace_overhead_bytes=qp._overhead,
        ack_next=qp._ack_every - 1 - qp._since_ack_req,
        ack_every=qp._ack_every,
        ack_last=d.ack_last,
        after_idle=after_idle,
        next_tx_s=qp._next_tx_s,
        last_tx_s=qp._last_tx_s,
        last_tx_bits=qp._last_tx_bits,
        max_burst_s=qp._max_burst_s,
        rate_bps=qp.cc.rate_bps,
        cc_deadline_s=deadline,
        cc_slack_s=slack,
        byte_budget=budget,
    )


def opcodes(qp: SendQueuePair) -> tuple[int, int, int, int]:
    """Its packets' opcodes by position: first, middle, last, only."""
    return (qp._op_first, qp._op_middle, qp._op_last, qp._op_only)


def next_psn(qp: SendQueuePair) -> int:
    """The PSN of the next new packet."""
    return (qp._initial_psn + qp._next_seq) & PSN_MASK


def _timer_stays(
    qp: SendQueuePair, now: float, armed_s: float, count: int, ack_next: int, ack_last: bool
) -> bool:
    """No packet of the run brings next_timer_s() below armed_s - slack: a lower bound of it
    over the run. The controller's deadline does not move (nothing it counts acts); the
    retransmission deadline only moves later once running (max(_ack_req_sent_s,
    _last_progress_s) grows), and one the run starts runs from a send time >= now."""
    cc_deadline = qp.cc.next_deadline_s()
    low = math.inf if cc_deadline is None else cc_deadline
    rto = qp._rto_deadline_s()
    if rto is not None:
        low = min(low, rto)
    elif ack_next < count or ack_last:
        low = min(low, now + qp._rto_s)
    return low == math.inf or low >= armed_s - TIMER_SLACK_S


def fold(
    qp: SendQueuePair,
    *,
    count: int,
    paced_bytes: int,
    ack_k: int,
    ack_sent_s: float,
    last_tx_s: float,
    last_tx_bits: int,
    next_tx_s: float,
) -> None:
    """`count` packets of its grant were sent (the first `count`, in order): what those
    poll_transmit calls would have changed. `ack_k`: the message index of the last of them
    with AckReq, sent at `ack_sent_s` (-1: none)."""
    m = qp._msgs[qp._seg]
    qp._take_new(count)
    qp.message_id_sent = m.message_id
    qp.packets_sent += count
    if ack_k >= 0:
        qp._ack_req_sent_s = ack_sent_s
        qp._ack_req_seq = m.first_seq + ack_k
    qp._last_tx_s = last_tx_s
    qp._last_tx_bits = last_tx_bits
    qp._next_tx_s = next_tx_s
    if paced_bytes:  # nothing to count for a controller that counted them itself
        qp.cc.count_quiet_bytes(paced_bytes)
