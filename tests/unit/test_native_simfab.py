"""The simulated fabric's C core (emulator/native/simfab.c) in pieces: its random draws are
CPython's random.Random's (the Mersenne Twister, its state handed over), and its event heap
runs equal times in the order they were scheduled, as emulator/sim/engine.py does. The whole
fabric against the Python one is tests/integration/test_sim_native.py.

Without the extension these tests skip with the reason, except `test_extension_is_built`, which
fails wherever a C compiler is present (CI runs ./setup.sh, which builds it).
"""

from __future__ import annotations

import random
import shutil
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from emulator.native import HERE, built_path, stale
from emulator.sim import native
from emulator.sim.engine import Simulator
from emulator.sim.readings import PortReader

MODULE, WHY_NOT = native.load_module()
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native simfab absent: {WHY_NOT}")


def test_extension_is_built() -> None:
    if not (HERE / "simfab.c").exists() or shutil.which("gcc") is None:
        pytest.skip("no native sources or no gcc here: the Python fabric is the only one")
    assert not stale("simfab"), f"{built_path('simfab')} is missing or stale: {WHY_NOT}"
    assert MODULE is not None, WHY_NOT


def simulator(ports: int = 1) -> native.NativeSimulator:
    assert MODULE is not None
    return native.NativeSimulator(MODULE, ports, 0, 0, 0)


@needs_native
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), skip=st.integers(0, 700))
def test_the_c_generator_draws_what_random_random_draws(seed: int, skip: int) -> None:
    """Any seed, from any position in the state (across the 624-word regeneration)."""
    theirs = random.Random(seed)
    for _ in range(skip):
        theirs.random()
    sim = simulator(ports=2)
    native.set_rng(sim, 1, native.LOSS_RNG, theirs)
    native.set_rng(sim, 1, native.MARK_RNG, random.Random(seed ^ 1))
    ours = [native.rng_random(sim, 1, native.LOSS_RNG) for _ in range(700)]
    assert ours == [theirs.random() for _ in range(700)]


@needs_native
@settings(max_examples=25, deadline=None)
@given(times=st.lists(st.sampled_from([0.0, 1e-6, 2e-6, 2e-6 + 1e-15]), min_size=1, max_size=60))
def test_equal_times_run_in_the_order_scheduled(times: list[float]) -> None:
    """Against engine.Simulator: the same callbacks, scheduled alike (some schedule another
    at their own time), run in the same order, the clock where each expects it."""

    def trace(sim: Simulator | native.NativeSimulator) -> list[tuple[int, float]]:
        seen: list[tuple[int, float]] = []

        def fire(i: int) -> None:
            seen.append((i, sim.now))
            if i % 3 == 0:
                sim.at(sim.now, fire, 1000 + i)

        for i, t in enumerate(times):
            sim.at(t, fire, i)
        sim.run(until_s=1e-6)
        sim.run(until_s=1.0)
        assert sim.now == 1.0 and sim.pending == 0
        return seen

    assert trace(simulator()) == trace(Simulator())


@needs_native
def test_a_run_past_its_event_budget_stops_saying_so() -> None:
    sim = simulator()

    def again() -> None:
        sim.at(sim.now, again)

    sim.at(0.0, again)
    with pytest.raises(RuntimeError, match="exceeded 100 events"):
        sim.run(until_s=1.0, max_events=100)


@needs_native
@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(
        st.tuples(
            st.integers(0, 2**62),
            st.integers(0, 2**40),
            st.integers(0, 2**40),
            st.integers(0, 2**40),
            st.integers(0, 2**40),
            st.floats(1e6, 1e12),
            st.booleans(),
            st.floats(0.0, 1.0),
            st.floats(0.0, 1.0),
            st.integers(0, 2**30),
            st.integers(0, 2**30),
        ),
        min_size=4,
        max_size=4,
    ),
    now=st.floats(0.0, 2.0),
)
def test_port_columns_read_from_the_c_arrays_are_the_ports_own_readings(
    values: list[tuple[Any, ...]], now: float
) -> None:
    """emulator/sim/readings.py's structured view of fab_port_t and fab_ingress_t against each
    NativePort's and NativeIngress's own properties: every field at its offset, the far end's
    headroom drops added, the paused time up to `now`, in the order asked."""
    assert MODULE is not None
    sim = native.NativeSimulator(MODULE, 4, 0, 2, 0)
    ports = [native.NativePort(sim, i, f"p{i}") for i in range(4)]
    ingresses = [native.NativeIngress(sim, j, ports[j]) for j in range(2)]
    for i, (tx, frames, marks, drops, queued, rate, paused, since, held, pauses, hdrm) in enumerate(
        values
    ):
        p = sim.fab.ports[i]
        p.tx_bytes, p.tx_frames, p.marks, p.drops, p.queued_bytes = tx, frames, marks, drops, queued
        p.rate_bps, p.paused, p.paused_since, p.paused_s, p.pause_frames = (
            rate,
            int(paused),
            since,
            held,
            pauses,
        )
        if i < 2:
            sim.fab.ingress[i].drops = hdrm
    # out of order, with the far ends on two of them
    sampled = [
        (ports[3], ingresses[0]),
        (ports[0], None),
        (ports[2], ingresses[1]),
        (ports[1], None),
    ]
    fast = PortReader(sampled)
    assert fast._native is not None  # the C path is taken for the C fabric's ports
    ours, theirs = fast.read(now), PortReader(sampled, vectorized=False).read(now)
    for name, a, b in zip(ours._fields, ours, theirs, strict=True):
        assert a.dtype == b.dtype, name
        assert a.tolist() == b.tolist(), name
        # each column its own memory: not a view that keeps every port's whole struct alive
        assert a.flags.c_contiguous and a.base is None, name


class _Qp:
    def __init__(self, qpn: int) -> None:
        self.qpn = qpn


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    script=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([0.0, 1e-6, 2e-6, 3e-6]), st.booleans()),
        min_size=1,
        max_size=30,
    )
)
def test_timers_armed_in_c_fire_as_the_hosts_own_and_skip_the_stale(
    script: list[tuple[int, float, bool]],
) -> None:
    """Host._arm_timer and Host._timer's stale check (nodes.py) with the timers in C
    (native_sqp.SendOffload.arm, fab_sqp_timer) against sim.at on engine.Simulator: the same
    timers run at the same times in the same order among other callbacks, the stale ones (an
    earlier timer replaced them, or theirs ran) never reach Python, and the heap counts the
    same events. Each step arms queue pair q at t (from a callback at t, so at most as early
    as then), and a fired timer may arm its queue pair again later."""
    assert MODULE is not None
    from emulator.sim.native_sqp import SendOffload

    def trace(use_c: bool) -> tuple[list[tuple[str, int, float]], int]:
        sim: Simulator | native.NativeSimulator = simulator() if use_c else Simulator()
        tx = None
        if use_c:
            assert isinstance(sim, native.NativeSimulator)
            tx = sim.tx = SendOffload(sim.ffi, sim.lib, sim.fab, {})
        qps = [_Qp(q) for q in range(3)]
        timer_at: dict[int, float] = {}
        log: list[tuple[str, int, float]] = []

        class Host:
            def _timer(self, qp: _Qp) -> None:
                now = sim.now
                if now + 1e-12 < timer_at.get(qp.qpn, float("inf")):
                    log.append(("stale", qp.qpn, now))
                    return
                timer_at[qp.qpn] = float("inf")
                if tx is not None:
                    tx.disarm(qp)  # type: ignore[arg-type]
                log.append(("fire", qp.qpn, now))
                if qp.qpn == 0 and now < 5e-6:
                    arm(qp, now + 2e-6)

        host = Host()

        def arm(qp: _Qp, when: float) -> None:
            if when < timer_at.get(qp.qpn, float("inf")) - 1e-12:
                timer_at[qp.qpn] = when
                if tx is None:
                    sim.at(when, host._timer, qp)
                else:
                    tx.arm(host, qp, when)  # type: ignore[arg-type]

        def step(q: int, delay: float, mark: bool) -> None:
            log.append(("step", q, sim.now))
            arm(qps[q], sim.now + delay)
            if mark:
                sim.at(sim.now, lambda: log.append(("mark", q, sim.now)))

        for i, (q, delay, mark) in enumerate(script):
            sim.at(i * 0.5e-6, step, q, delay, mark)
        sim.run(until_s=1.0)
        return log, sim.events_run

    ours, ours_events = trace(True)
    theirs, their_events = trace(False)
    stale = sum(1 for e in theirs if e[0] == "stale")
    event(f"stale timers: {min(stale, 3)}")
    assert not [e for e in ours if e[0] == "stale"], "a stale timer reached Python"
    assert ours == [e for e in theirs if e[0] != "stale"]
    assert ours_events == their_events
