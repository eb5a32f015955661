"""Ports read as columns (PortSamples, one event for every port at an instant) record what the
same readings record one port at a time (PortSample): the same ports table, value for value,
and the same live totals, pauses, queues and utilization, through counter resets, ports
without a rate, and readings at the same instant."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.live import RunInfo
from collectors.recorder import RunRecorder
from emulator.events import NicSample, NicSamples, PortSample, PortSamples

PORTS = (("l0", "l0-s0"), ("l0", "l0-s1"), ("s0", "s0-l0"))


def recorder() -> RunRecorder:
    return RunRecorder([], [], RunInfo("s", 1.0, "m", "clos"), 100e9, 400e9)


readings = st.lists(
    st.tuples(
        st.sampled_from([0.0, 1e-4, 2e-4]),  # time step (0: the same instant again)
        st.lists(st.integers(-5_000, 50_000), min_size=len(PORTS), max_size=len(PORTS)),
        st.lists(st.integers(0, 3), min_size=len(PORTS), max_size=len(PORTS)),
        st.booleans(),  # with pause counters
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(readings, st.lists(st.sampled_from([0.0, 100e9, 400e9]), min_size=3, max_size=3))
def test_columns_record_what_one_port_at_a_time_records(
    steps: list[tuple[float, list[int], list[int], bool]], rates: list[float]
) -> None:
    one, cols = recorder(), recorder()
    t = 0.0
    tx = np.zeros(len(PORTS), dtype=np.int64)
    marks = np.zeros(len(PORTS), dtype=np.int64)
    pause_s = np.zeros(len(PORTS))
    pauses = np.zeros(len(PORTS), dtype=np.int64)
    with_pauses = steps[0][3]  # a fabric tells pauses at every reading or at none
    for dt, grow, mark, _ in steps:
        t += dt
        # a negative step below the total is a counter reset (interface re-created)
        tx = np.where(tx + grow >= 0, tx + grow, np.int64(abs(grow[0])))
        marks = marks + mark
        pause_s = pause_s + np.array(mark) * 1e-6
        pauses = pauses + np.array(mark)
        queue = np.array(grow).clip(0)
        one.on_events(
            [
                PortSample(
                    t,
                    sw,
                    port,
                    int(tx[i]),
                    int(tx[i] // 4096),
                    int(marks[i]),
                    i,
                    int(queue[i]),
                    rates[i] or None,
                    float(pause_s[i]) if with_pauses else None,
                    int(pauses[i]) if with_pauses else None,
                )
                for i, (sw, port) in enumerate(PORTS)
            ]
        )
        cols.on_event(
            PortSamples(
                t,
                PORTS,
                tx.copy(),
                tx // 4096,
                marks.copy(),
                np.arange(len(PORTS), dtype=np.int64),
                queue,
                np.array(rates),
                pause_s.copy() if with_pauses else None,
                pauses.copy() if with_pauses else None,
            )
        )
    assert cols.tables().ports.to_pylist() == one.tables().ports.to_pylist()
    for name in ("port_totals", "port_pause", "port_queue_bytes", "port_utilization"):
        assert dict(getattr(cols.live, name)) == dict(getattr(one.live, name)), name


NICS = ((0, "tx"), (0, "rx"), (1, "tx"), (1, "rx"))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0.0, 1e-4, 2e-4]),
            st.lists(st.integers(-3_000, 40_000), min_size=len(NICS), max_size=len(NICS)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_nic_columns_record_what_one_counter_at_a_time_records(
    steps: list[tuple[float, list[int]]],
) -> None:
    one, cols = recorder(), recorder()
    t = 0.0
    counts = np.zeros(len(NICS), dtype=np.int64)
    for dt, grow in steps:
        t += dt
        counts = (counts + grow).clip(0)  # a step below zero: the counter restarted
        one.on_events(
            [NicSample(t, rank, d, int(counts[i])) for i, (rank, d) in enumerate(NICS)]  # type: ignore[arg-type]
        )
        cols.on_event(NicSamples(t, NICS, counts.copy()))  # type: ignore[arg-type]
    assert cols.tables().nic.to_pylist() == one.tables().nic.to_pylist()
    assert dict(cols.live.nic_bytes) == dict(one.live.nic_bytes)
    assert cols.live.nic_utilization == one.live.nic_utilization
