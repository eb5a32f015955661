"""DCQCN's reaction point in C (emulator/native/simfab_dcqcn.c) against the Python one
(emulator/transport/dcqcn.py ReactionPoint, whose rules its own tests hold to the public
sources): any parameters, any run of CNPs, timers, bytes sent and alpha reads at any times give
the same answers and the same state, bit for bit, and the state copies both ways
(emulator/sim/native_dcqcn.py) lose nothing."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from emulator.sim import native
from emulator.sim.native_dcqcn import REASONS, NativeReactionPoint, load, load_state
from emulator.transport.dcqcn import ReactionPoint
from emulator.transport.dcqcn_params import DcqcnParams

MODULE, WHY_NOT = native.load_module()
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native simfab absent: {WHY_NOT}")


@st.composite
def params(draw: Any) -> DcqcnParams:
    return DcqcnParams(
        dce_tcp_g=draw(st.sampled_from([1019, 1000, 0, 1023])),
        dce_tcp_rtt_us=draw(st.sampled_from([1.0, 0.7, 55.0])),
        initial_alpha_value=draw(st.sampled_from([1023, 512, 0])),
        rate_reduce_monitor_period_us=draw(st.sampled_from([4.0, 0.0, 2.5, 50.0])),
        rate_to_set_on_first_cnp_mbps=draw(st.sampled_from([0.0, 1000.0, 1e9])),
        rpg_min_dec_fac=draw(st.sampled_from([50, 0, 100, 33])),
        rpg_min_rate_mbps=draw(st.sampled_from([1.0, 0.0, 5000.0])),
        rpg_time_reset_us=draw(st.sampled_from([300.0, 55.0, 1.5])),
        rpg_byte_reset_bytes=draw(st.sampled_from([2096960, 4096, 10000, 1])),
        rpg_threshold=draw(st.sampled_from([1, 5])),
        rpg_ai_rate_mbps=draw(st.sampled_from([5.0, 40.0, 0.0])),
        rpg_hai_rate_mbps=draw(st.sampled_from([50.0, 1000.0])),
        clamp_tgt_rate=draw(st.booleans()),
        clamp_tgt_rate_after_time_inc=draw(st.booleans()),
    )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["cnp", "cnp", "timer", "bytes", "alpha", "copy"]),
        st.sampled_from([0.0, 1e-7, 1e-6, 3.3e-6, 4e-6, 5.5e-5, 3e-4, 2e-3]),
        st.sampled_from([64, 1078, 4154, 65536]),
    ),
    min_size=1,
    max_size=80,
)


def state(rp: ReactionPoint) -> dict[str, Any]:
    return {k: v for k, v in vars(rp).items() if k != "params"}


def store(c: Any, rp: ReactionPoint) -> None:
    """The C state into a Python reaction point (load_state's inverse, to compare them)."""
    rp.active = bool(c.active)
    rp.last_reason = REASONS[c.last_reason]
    rp._cnp_in_period = bool(c.cnp_in_period)
    rp._increased_since_cut = bool(c.increased_since_cut)
    rp._counting = bool(c.counting)
    rp.current_rate_bps = float(c.current_rate_bps)
    rp.target_rate_bps = float(c.target_rate_bps)
    rp.alpha = float(c.alpha)
    rp._alpha_epoch_s = float(c.alpha_epoch_s)
    rp._decrease_epoch_s = float(c.decrease_epoch_s)
    rp._decrease_due_s = float(c.decrease_due_s)
    rp._next_increase_s = float(c.next_increase_s)
    rp._timer_events = int(c.timer_events)
    rp._byte_events = int(c.byte_events)
    rp._bytes_since_reset = int(c.bytes_since_reset)


@needs_native
@settings(max_examples=400, deadline=None)
@given(params(), st.sampled_from([100e9, 40e9, 25e9]), OPS)
def test_the_c_reaction_point_is_the_python_one(
    p: DcqcnParams, line_rate_bps: float, ops: list[tuple[str, float, int]]
) -> None:
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    theirs = ReactionPoint(p, line_rate_bps=line_rate_bps)
    c = ffi.new("fab_rp_t *")
    # what a queue pair's controller holds once its slot in the C fabric holds the state
    native = NativeReactionPoint(ReactionPoint(p, line_rate_bps=line_rate_bps), ffi, lib, c, c)
    ours = ReactionPoint(p, line_rate_bps=line_rate_bps)  # where the C state is stored to
    now = 0.0
    changes = 0
    for op, step, size in ops:
        now += step
        if op == "cnp":
            expected = theirs.on_cnp(now=now)
            assert native.on_cnp(now=now) == expected
        elif op == "timer":
            due = theirs.next_deadline_s()
            if due is not None and due > now:
                now = due  # the host runs the timer at its deadline
            expected = theirs.on_timer(now=now)
            assert native.on_timer(now=now) == expected
        elif op == "bytes":
            expected = theirs.on_bytes_sent(now=now, size_bytes=size)
            assert native.on_bytes_sent(now=now, size_bytes=size) == expected
        elif op == "alpha":
            expected = False
            assert native.alpha_at(now=now) == theirs.alpha_at(now=now)
        else:  # a round trip through the copies: Python's state back into C
            store(c, ours)
            load_state(ours, c)
            expected = False
        changes += expected
        assert native.next_deadline_s() == theirs.next_deadline_s()
        assert native.quiet() == theirs.quiet()
        assert (native.current_rate_bps, native.target_rate_bps) == (
            theirs.current_rate_bps,
            theirs.target_rate_bps,
        )
        assert (native.active, native.last_reason) == (theirs.active, theirs.last_reason)
        store(c, ours)
        assert state(ours) == state(theirs), (op, now)
    event(f"rate changes: {min(changes, 5)}")
    event(f"active at the end: {theirs.active}")


@needs_native
def test_a_cut_and_a_recovery_read_the_same_rates() -> None:
    """One episode spelled out: a CNP, the cut at its period's end, increases back to line rate
    (the limiter released): every rate the same in both."""
    assert MODULE is not None
    ffi, lib = MODULE.ffi, MODULE.lib
    p = DcqcnParams(rpg_time_reset_us=55.0)
    theirs = ReactionPoint(p, line_rate_bps=40e9)
    c = ffi.new("fab_rp_t *")
    load(theirs, c)
    native = NativeReactionPoint(ReactionPoint(p, line_rate_bps=40e9), ffi, lib, c, c)
    assert not native.on_cnp(now=1e-6) and not theirs.on_cnp(now=1e-6)
    rates = []
    now = 1e-6
    while theirs.active and now < 1.0:
        due = theirs.next_deadline_s()
        assert due is not None and native.next_deadline_s() == due
        now = due
        assert native.on_timer(now=now) and theirs.on_timer(now=now)
        assert native.current_rate_bps == theirs.current_rate_bps
        rates.append(theirs.current_rate_bps)
    assert rates[0] < 40e9 and rates[-1] == 40e9 and not native.active
    assert native.next_deadline_s() is None and len(rates) > 10
    assert math.isinf(c.next_increase_s)
