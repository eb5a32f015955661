"""The pure parts of `emulate run`: TDF choice, calibration cache, iteration numbering, the
progress line, the --trace/--fabric quick scenario, and dynamic plan registration."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from collectors.records import CollectiveMeta, FlowMeta, RecordBuilder
from emulator.commands.run import fabric_mapping, quick_scenario
from emulator.errors import EnvironmentProblem, InputError
from emulator.events import FlowFinished, FlowStarted
from emulator.planning.iterations import IterationNumbering
from emulator.planning.workload import generated_steps
from emulator.progress import ProgressLine, ProgressState
from emulator.scenario import load_scenario
from emulator.schedule.plan import CollectiveInstance
from emulator.timescale.curve import (
    CACHE_ENV,
    Calibration,
    LoadPoint,
    load_cached,
    machine_key,
    store,
)
from emulator.timescale.tdf import auto_tdf, point_tdf, round_up_2sig
from emulator.transport.params import DcqcnParams
from fabrics.spec import ClosSpec

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.3, 1.0),
        (1.0, 1.0),
        (1.01, 1.1),
        (5.3, 5.3),
        (12.0, 12.0),
        (12.01, 13.0),
        (2891.4, 2900.0),
    ],
)
def test_round_up_to_two_significant_digits(value: float, expected: float) -> None:
    assert round_up_2sig(value) == pytest.approx(expected)
    assert round_up_2sig(value) >= min(value, 1.0) or value < 1


def _curve(*points: tuple[float, float, float, float, float]) -> Calibration:
    return Calibration(
        0.0, 32, 4096, 9.0, "m", "2026-11-24T00:00:00Z",
        points=tuple(LoadPoint(*p) for p in points),
    )  # fmt: skip


def test_auto_tdf_is_the_lowest_at_which_the_engine_checks_hold() -> None:
    dcqcn = DcqcnParams()  # reaction timer 4 us, increase period 300 us
    peak = 16 * 400e9
    curve = _curve(
        # offered, delivered, p99 late, max late (wall s), busiest worker
        (1e9, 1e9, 2e-3, 20e-3, 0.2),
        (2e9, 1.99e9, 3e-3, 30e-3, 0.4),
        (4e9, 3.9e9, 8e-3, 60e-3, 0.7),
        (8e9, 5e9, 20e-3, 90e-3, 0.99),  # behind its pacing: never used
    )
    # at 4 Gb/s: load needs 1600, lateness p99 8 ms / 4 us = 2000 -> 2000
    # at 2 Gb/s: load needs 3200 -> 3200; at 1 Gb/s: 6400. The lowest is 2000, bound by p99.
    tdf, why = auto_tdf(peak, curve, dcqcn, 0.95)
    assert tdf == 2000 and "p99" in why
    # the same machine with a small scenario: lateness alone sets the factor
    tdf, why = auto_tdf(4 * 25e9, curve, dcqcn, 0.95)
    assert tdf == 500 and "p99" in why  # 2 ms / 4 us at the 1 Gb/s point
    # a quiet worker whose lateness is tiny: the load bounds it
    quiet = _curve((4e9, 4e9, 10e-6, 100e-6, 0.5))
    assert auto_tdf(peak, quiet, dcqcn, 0.95) == (1600.0, auto_tdf(peak, quiet, dcqcn, 0.95)[1])
    assert "load" in auto_tdf(peak, quiet, dcqcn, 0.95)[1]
    # lateness p99 is judged in target time: at the chosen TDF it is within the timer
    assert point_tdf(curve.points[2], peak, dcqcn)[0] * 4e-6 >= 8e-3
    assert auto_tdf(1e6, quiet, dcqcn, 0.95)[0] == 2.5  # 10 us p99 over a 4 us timer
    instant = _curve((4e9, 4e9, 1e-6, 1e-5, 0.5))
    assert auto_tdf(1e6, instant, dcqcn, 0.95)[0] == 1.0  # never below real time
    with pytest.raises(EnvironmentProblem, match="no load this machine delivers on pace"):
        auto_tdf(peak, _curve((1e9, 0.5e9, 1e-3, 1e-3, 0.3)), dcqcn, 0.95)


def _calibration(mtu: int) -> Calibration:
    return Calibration(
        4.2e9, 4, mtu, 1.9, machine_key(mtu), "2026-11-22T00:00:00Z",
        points=(LoadPoint(1e9, 1e9, 1e-3, 2e-3, 0.3),),
    )  # fmt: skip


def test_calibration_cache_is_per_machine_and_mtu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert load_cached(4096) is None
    store(_calibration(4096))
    cached = load_cached(4096)
    assert cached is not None and cached.cached and cached.capacity_bps == 4.2e9
    assert cached.points == (LoadPoint(1e9, 1e9, 1e-3, 2e-3, 0.3),)
    assert load_cached(1024) is None  # another MTU is another measurement
    store(_calibration(1024))
    assert load_cached(4096) is not None and load_cached(1024) is not None
    assert (tmp_path / "calibration.json").stat().st_mode & 0o077 == 0
    (tmp_path / "calibration.json").write_text("{not json")
    assert load_cached(4096) is None  # a damaged cache is measured again, not fatal


def _instance(iid: int, collective: str, group: str, iteration: int = 0) -> CollectiveInstance:
    return CollectiveInstance(iid, iteration, collective, group, (0, 1), 1024, "ring", (), ())


def test_iteration_numbering_maps_each_pair_onto_the_steps() -> None:
    # one pass holding 3 steps: All-Reduce once per step, All-to-All twice (dispatch, combine)
    plan: list[CollectiveInstance] = []
    for step in range(3):
        plan += [
            _instance(len(plan), "ALL_TO_ALL", "ep", 0),
            _instance(len(plan) + 1, "ALL_TO_ALL", "ep", 0),
            _instance(len(plan) + 2, "ALL_REDUCE", "dp", 0),
        ]
        del step
    numbering = IterationNumbering(plan)
    assert numbering.steps_per_pass == 3 and numbering.total == 3
    got = [(i.collective, numbering.number(i)) for i in plan]
    assert [n for c, n in got if c == "ALL_REDUCE"] == [0, 1, 2]
    assert [n for c, n in got if c == "ALL_TO_ALL"] == [0, 0, 1, 1, 2, 2]


def test_iteration_numbering_uses_the_generated_step_count() -> None:
    # an All-to-All-only MoE trace: dispatch and combine, 3 steps; without the count it would
    # look like 6 steps (the least occurrence is the All-to-All's own)
    plan = [_instance(i, "ALL_TO_ALL", "ep", 0) for i in range(6)]
    assert IterationNumbering(plan).steps_per_pass == 6
    numbering = IterationNumbering(plan, steps_per_pass=3)
    assert numbering.total == 3
    assert [numbering.number(i) for i in plan] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("name", ["moe_mix", "allreduce_only", "alltoall_only"])
def test_the_study_scenarios_number_the_same_ten_steps(name: str) -> None:
    repo = Path(__file__).resolve().parents[2]
    assert generated_steps(load_scenario(repo / "scenarios" / f"{name}.yaml").workload) == 10


def test_iteration_numbering_of_replay_passes() -> None:
    plan = [_instance(i, "ALL_REDUCE", "w", iteration=i // 2) for i in range(4)]  # 2 per pass
    numbering = IterationNumbering([plan[0], plan[2], plan[1], plan[3]])
    assert numbering.passes == 2 and numbering.steps_per_pass == 2
    assert [numbering.number(i) for i in plan] == [0, 1, 2, 3]


def test_progress_line_reports_counts_and_estimate() -> None:
    out = io.StringIO()
    line = ProgressLine(100, 10, ideal_wall_s=50.0, stream=out, log_every_s=0.0)
    text = line.text(ProgressState(25, 2, 3.2e12), now=line.start + 30.0)
    assert "collectives 25/100" in text and "iterations 2/10" in text
    assert "elapsed 00:30" in text and "left ~01:30" in text  # 30 s for a quarter: 90 s left
    assert "3.2 Tb/s" in text and "#####" in text and "######" not in text
    line.update(ProgressState(25, 2, 0.0))
    assert out.getvalue().endswith("\n")  # not a terminal: whole lines, no carriage returns
    assert "\r" not in out.getvalue()


def test_fabric_mapping_parses_keys_and_sizes_a_default() -> None:
    assert fabric_mapping("clos:hosts_per_leaf=4,leaves=2,host_link_gbps=100", 8) == {
        "kind": "clos",
        "hosts_per_leaf": 4,
        "leaves": 2,
        "host_link_gbps": 100,
    }
    assert fabric_mapping(None, 20) == {"kind": "clos", "hosts_per_leaf": 8, "leaves": 3}
    with pytest.raises(InputError, match="KIND:KEY=VALUE"):
        fabric_mapping("clos:leaves", 4)


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"real traces folder {TRACES} is absent")
def test_quick_scenario_from_a_public_trace_set() -> None:
    prefix = TRACES / "astra-sim/examples/workload/microbenchmarks/all_reduce/4npus_1MB/all_reduce"
    args = argparse.Namespace(
        trace=str(prefix), fabric="clos:hosts_per_leaf=2,leaves=2", comm_groups=None
    )
    scenario = quick_scenario(args)
    assert isinstance(scenario.fabric, ClosSpec) and scenario.fabric.hosts_per_leaf == 2
    assert scenario.workload.trace == str(prefix.resolve())
    args.fabric = "clos:no_such_key=1"
    with pytest.raises(Exception, match="no_such_key"):
        quick_scenario(args)


def test_record_builder_learns_collectives_during_the_run() -> None:
    builder = RecordBuilder()
    builder.add(
        [FlowMeta(7, 3, "ALL_REDUCE", 0, 0, 0, 1, 0, 49152, 1000)],
        [CollectiveMeta(3, "ALL_REDUCE", "dp", 2, 0, 1000, 1e-3)],
    )
    builder.flow_started(FlowStarted(7, 0.0))
    assert builder.flow_finished(FlowFinished(7, 2e-3, 1, 0, 0, 0, 0)) == 3
    with pytest.raises(ValueError, match="already"):
        builder.add([], [CollectiveMeta(3, "ALL_REDUCE", "dp", 2, 0, 1000, 1e-3)])
    with pytest.raises(ValueError, match="not in the plan"):
        builder.add([FlowMeta(8, 4, "ALL_REDUCE", 0, 0, 0, 1, 0, 49152, 1000)], [])


def test_burst_reason_flags_flows_short_next_to_the_shaper_bursts() -> None:
    from emulator.timescale.verdict import burst_reason

    fabric = {"shaper_burst_bytes": 8_220, "shaped_hops_max": 4}
    # 4 hops x 8220 bytes = 32880: 25% of a 128 KiB flow, 1.6% of a 2 MiB one
    reason = burst_reason([131_072] * 3 + [2 << 20], fabric)
    assert reason is not None and "131072 bytes" in reason and "25%" in reason
    assert burst_reason([2 << 20] * 3, fabric) is None
    assert burst_reason([], fabric) is None
    assert burst_reason([1_000], {"backend": "dut"}) is None  # a real switch has no HTB burst


def test_burst_reason_judges_the_time_a_burst_saves_against_the_measured_fct() -> None:
    from emulator.timescale.verdict import burst_reason
    from fabrics.spec import ClosSpec, DutSpec

    fabric = {"shaper_burst_bytes": 18_028, "shaped_hops_max": 4}
    flows = [262_144] * 9
    # 4 x 18028 bytes at 400 Gb/s save at most 1.44 us: 28% of a 256 KiB flow alone at line
    # rate (5.2 us), but 1.9% of the 75 us it takes beside 13 others (an All-to-All)
    assert burst_reason(flows, fabric) is not None  # no FCTs: the bytes' bound
    assert burst_reason(flows, fabric, [75e-6] * 9, 400e9) is None
    alone = burst_reason(flows, fabric, [5.3e-6] * 9, 400e9)
    assert alone is not None and "1.44 us" in alone and "27%" in alone
    # the unfinished (None) are left out; the slowest link rate counts
    assert burst_reason(flows, fabric, [None, 75e-6, 75e-6], 400e9) is None  # type: ignore[list-item]
    spec = ClosSpec(host_link_gbps=400, fabric_link_gbps=100)
    assert spec.slowest_link_bps == 100e9
    dut = DutSpec(interfaces=("eth1",), addresses=("10.1.0.2/24",), allowlist=("10.1.0.0/24",))
    assert dut.slowest_link_bps is None


def test_signals_during_teardown_wait_until_it_is_over() -> None:
    import os
    import signal

    from emulator.interrupts import signals_deferred

    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("released everything")  # not cut short by either signal
    assert steps == ["released everything"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    with signals_deferred():  # no signal: nothing raised
        steps.append("again")
    assert steps[-1] == "again"


def test_iteration_numbering_restarts_for_a_new_replay() -> None:
    plan = [_instance(i, "ALL_REDUCE", "dp", 0) for i in range(3)]
    numbering = IterationNumbering(plan, 3)
    assert [numbering.number(i) for i in plan] == [0, 1, 2]
    numbering.restart()  # auto TDF's probe replayed the plan first: the run starts at 0 again
    assert [numbering.number(i) for i in plan] == [0, 1, 2]


def test_a_calibration_is_cached_per_data_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native and the Python data path carry different loads per core: a curve measured
    on one is not the other's (emulator.timescale.curve keys it by the path)."""
    from emulator.engine.native_path import NATIVE, PYTHON, expected_path
    from emulator.timescale.curve import Calibration, load_cached, machine_key, store

    monkeypatch.setenv("CHAKRA_EMULATOR_CACHE_DIR", str(tmp_path))
    assert expected_path("off") == PYTHON
    mtu = 4096
    native = Calibration(4.2e9, 4, mtu, 1.9, machine_key(mtu, None, NATIVE), "t", data_path=NATIVE)
    store(native)
    assert load_cached(mtu, data_path=NATIVE) is not None
    assert load_cached(mtu, data_path=PYTHON) is None


def test_the_calibration_shape_measures_with_the_engines_default_nic_quantum() -> None:
    """A scenario without engine.nic_quantum_bytes is calibrated with the arbiter it runs with
    (the load curve with packet-by-packet turns carries a third of what it does with them)."""
    from emulator.engine.params import EngineParams
    from emulator.timescale.curve import Shape

    assert Shape().nic_quantum_bytes == EngineParams().nic_quantum_bytes
    assert "NIC quantum 0 B" in Shape(nic_quantum_bytes=0).key()
