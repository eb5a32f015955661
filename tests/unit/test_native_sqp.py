"""The C fabric's slot for a granted send queue pair (emulator/sim/native_sqp.py) holds what the
queue pair's SendGrant says (emulator.transport.grant, which tests/unit/test_transport_grant.py
holds to poll_transmit): the offload writes the slot from the grant's decision and the queue pair
itself, without building the SendGrant, and must describe the same packets."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import event, given, settings

from emulator.sim import native
from emulator.sim.native_sqp import SendOffload
from emulator.transport.grant import grant
from emulator.transport.packets import RETH_OPCODES
from emulator.transport.sender import IPV4_FRAME_OVERHEAD_BYTES, SendQueuePair
from tests.unit.test_transport_grant import histories

MODULE, WHY_NOT = native.load_module()
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native simfab absent: {WHY_NOT}")


def host_for(qp: SendQueuePair, now: float, armed: float, tag: int | None) -> Any:
    """What SendOffload.grant reads of a nodes.Host."""
    return SimpleNamespace(
        capture=None,
        _qp_entropy={},
        sim=SimpleNamespace(now=now),
        _timer_at={} if armed == math.inf else {qp.qpn: armed},
        _qp_route={qp.qpn: ("h1", "10.0.0.2", 50000, 1234, 77)},
        arbiter=0,
        _ecn=(2, 0, 0),
        _priority=(False, False, True),
        message_tags={} if tag is None else {qp._msgs[qp._seg].message_id: tag},
    )


@needs_native
@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_slot_says_what_the_grant_says(case: tuple[SendQueuePair, float, float]) -> None:
    assert MODULE is not None
    qp, now, armed = case
    tagged = qp._seg < len(qp._msgs) and qp._msgs[qp._seg].message_id % 2 == 0
    host = host_for(qp, now, armed, 5 if tagged else None)
    g = grant(qp, now=now, timer_armed_s=armed)
    ffi, lib = MODULE.ffi, MODULE.lib
    fab = ffi.gc(lib.fab_new(1, 0, 0, 0), lib.fab_free)
    offload = SendOffload(ffi, lib, fab, {"h0": 0, "h1": 1})
    offload.grant(host, qp)
    s = offload._slots[offload._ids[qp]]
    assert (s.granted, s.remaining, s.state) == (g.granted, g.granted, lib.SQP_GRANTED)
    assert bool(s.after_idle) == g.after_idle
    assert s.next_tx_s == qp.pacing_due_s
    event(f"granted: {g.granted > 0}")
    if not g.granted:
        return
    assert s.flow == g.message_id
    assert s.tag == (5 if tagged else 77)
    assert (s.msg_packets, s.msg_bytes, s.k, s.psn) == (
        g.message_packets,
        g.message_bytes,
        g.k,
        g.psn,
    )
    assert (s.mtu, tuple(s.opcodes), s.pace_overhead) == (g.mtu, g.opcodes, g.pace_overhead_bytes)
    assert s.reth_mask == sum(1 << j for j, r in enumerate(g.reth) if r)
    assert all(r == (op in RETH_OPCODES) for op, r in zip(g.opcodes, g.reth, strict=True))
    assert (s.ack_every, s.ack_next, bool(s.ack_last)) == (g.ack_every, g.ack_next, g.ack_last)
    assert (s.last_tx_s, s.last_tx_bits, s.rate_bps, s.max_burst_s) == (
        g.last_tx_s,
        g.last_tx_bits,
        g.rate_bps,
        g.max_burst_s,
    )
    assert (s.cc_deadline_s, s.cc_slack_s, s.byte_budget) == (
        g.cc_deadline_s,
        g.cc_slack_s,
        g.byte_budget,
    )
    assert (s.dst, s.sport, s.mhash, s.ecn, s.priority) == (1, 50000, 1234, 2, 0)
    assert (s.dest_qp, s.frame_overhead, s.granted_bytes) == (
        qp.dest_qp,
        IPV4_FRAME_OVERHEAD_BYTES,
        0,
    )
