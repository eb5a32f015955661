"""collectors.reference: the two-sample KS distance by hand, and a run held against a reference
per collective type (busbw ratio and CV, FCT distributions, types in one run only)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from collectors.records import CollectiveRecord, FlowRecord
from collectors.reference import (
    ReferenceBounds,
    compare_runs,
    draw_folder,
    draw_folders,
    ks_distance,
    reference_lines,
)
from collectors.tables import RunTables

MS = 1e-3


def collective(cid: int, ctype: str, busbw: float | None) -> CollectiveRecord:
    return CollectiveRecord(
        collective_id=cid,
        collective_type=ctype,
        process_group="0",
        group_size=4,
        iteration=cid,
        bytes=1 << 20,
        flows=4,
        flows_finished=4 if busbw is not None else 0,
        complete=busbw is not None,
        start_s=0.0,
        ready_s=0.0,
        end_s=None,
        completion_time_s=None,
        bandwidth_time_s=None,
        algbw_bytes_per_s=None,
        busbw_bytes_per_s=busbw,
        ideal_time_s=None,
        ideal_algbw_bytes_per_s=None,
        ideal_busbw_bytes_per_s=None,
        busbw_ratio=None,
    )


def flow(fid: int, ctype: str, fct: float | None, cnps: int = 0, ce: int = 0) -> FlowRecord:
    return FlowRecord(
        flow_id=fid,
        collective_id=0,
        collective_type=ctype,
        iteration=0,
        step=0,
        src_rank=0,
        dst_rank=1,
        qp=1,
        udp_sport=49152,
        bytes=1 << 18,
        start_s=1.0,
        end_s=None if fct is None else 1.0 + fct,
        fct_s=fct,
        packets=64,
        retransmitted_packets=0,
        ce_marks=ce,
        cnps_sent=cnps,
        cnps_received=cnps,
    )


def tables(
    busbws_gbps: Sequence[float] = (10.0, 12.0, 14.0),
    fcts_ms: Sequence[float | None] = (1.0, 2.0, 3.0, 4.0),
    ctype: str = "ALL_REDUCE",
    extra_type: bool = False,
) -> RunTables:
    colls = [collective(i, ctype, b * 1e9) for i, b in enumerate(busbws_gbps)]
    flows = [
        flow(i, ctype, None if f is None else f * MS, cnps=i + 1, ce=2 * (i + 1))
        for i, f in enumerate(fcts_ms)
    ]
    if extra_type:
        colls.append(collective(len(colls), "ALL_TO_ALL", 5e9))
        flows.append(flow(len(flows), "ALL_TO_ALL", 7 * MS, cnps=9, ce=11))
    return RunTables.from_rows(flows=flows, collectives=colls)


def test_ks_distance_by_hand() -> None:
    assert ks_distance([3.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
    assert ks_distance([1.0, 2.0], [5.0, 6.0, 7.0]) == 1.0
    # x=1: 1/3 vs 0; x=2: 2/3 vs 1/2; x=3: 1 vs 1/2 (the largest gap); x=4: 1 vs 1.
    assert ks_distance([1.0, 2.0, 3.0], [2.0, 4.0]) == pytest.approx(0.5)
    # Ties count fully at their value: x=1: 2/3 vs 1/3, x=2: 1 vs 1.
    assert ks_distance([1.0, 1.0, 2.0], [1.0, 2.0, 2.0]) == pytest.approx(1 / 3)
    assert ks_distance([], [1.0]) is None
    assert ks_distance([1.0], []) is None


def test_ks_distance_with_a_tolerance_forgives_a_small_shift_and_not_a_tail() -> None:
    # Equal flows finishing together, one run 1% faster: the plain statistic reads 1 (disjoint
    # samples); 5% of FCT forgives it.
    ref = [100.0, 100.1, 100.2, 100.3]
    run = [99.0, 99.1, 99.2, 99.3]
    assert ks_distance(run, ref) == 1.0
    assert ks_distance(run, ref, 0.05) == 0.0 and ks_distance(ref, run, 0.05) == 0.0
    # A quarter of the flows 40% late is a tail, tolerance or not.
    tail = [100.0, 100.1, 100.2, 140.0]
    assert ks_distance(tail, ref, 0.05) == pytest.approx(0.25)
    # By hand at 10%: a = 1, 2, 3; b = 1.05, 2.5, 3.5. F_a(2) = 2/3 against F_b(2.2) = 1/3 is
    # the largest gap either way round (F_b(x) never leads F_a(1.1 x) by more than 0).
    assert ks_distance([1.0, 2.0, 3.0], [1.05, 2.5, 3.5], 0.10) == pytest.approx(1 / 3)
    # it never exceeds the plain statistic, and 0 tolerance is the plain statistic
    rng = random.Random(3)
    for _ in range(30):
        a = [rng.lognormvariate(0, 0.3) for _ in range(rng.randrange(1, 30))]
        b = [rng.lognormvariate(0.05, 0.3) for _ in range(rng.randrange(1, 30))]
        plain = ks_distance(a, b)
        assert plain is not None
        assert ks_distance(a, b, 0.0) == pytest.approx(plain)
        tolerant = ks_distance(a, b, 0.05)
        assert tolerant is not None and 0.0 <= tolerant <= plain + 1e-12


def test_ks_distance_is_symmetric_and_within_0_1() -> None:
    rng = random.Random(7)
    for _ in range(50):
        a = [rng.lognormvariate(0, 1) for _ in range(rng.randrange(1, 40))]
        b = [rng.lognormvariate(0.3, 1) for _ in range(rng.randrange(1, 40))]
        d = ks_distance(a, b)
        assert d is not None and 0.0 <= d <= 1.0
        assert d == ks_distance(b, a)
        # The statistic is a gap between step functions with steps of 1/n and 1/m.
        assert any(
            math.isclose(d, i / len(a) - j / len(b), abs_tol=1e-12)
            or math.isclose(d, j / len(b) - i / len(a), abs_tol=1e-12)
            for i in range(len(a) + 1)
            for j in range(len(b) + 1)
        )


def test_equal_runs_agree() -> None:
    result = compare_runs(tables(), tables())
    assert result["deviations"] == [] and result["not_measured"] == []
    assert result["bounds"] == {
        "busbw_mean_ratio": 0.10,
        "ks_distance": 0.25,
        "busbw_cv_abs": 0.10,
        "fct_tolerance": 0.05,
        "job_time_ratio": 0.10,
    }
    row = result["by_collective"]["ALL_REDUCE"]
    assert row["busbw_mean_gbps"] == [pytest.approx(12.0), pytest.approx(12.0)]
    assert row["busbw_mean_ratio"] == 1.0
    cv = math.sqrt(8 / 3) / 12  # population std of 10, 12, 14 over their mean
    assert row["busbw_cv"] == [pytest.approx(cv), pytest.approx(cv)]
    assert row["fct_ks_distance"] == 0.0
    assert row["fct_count"] == [4, 4]
    assert row["cnps"] == [10, 10] and row["ecn_marks"] == [20, 20]
    json.dumps(result)  # JSON-ready
    lines = reference_lines(result)
    assert lines[0].split()[:3] == ["collective", "busbw", "GB/s"]
    assert lines[2].split() == [
        "ALL_REDUCE",
        "12.00/12.00",
        "1.000",
        "0.136/0.136",
        "0.000",
        "10/10",
        "20/20",
    ]
    assert lines[3] == "job time run/ref 4.000/4.000 ms, ratio 1.000"
    assert lines[4] == (
        "agrees within the bounds (busbw mean within 10%, busbw CV within 0.10, "
        "FCT KS distance at most 0.25 beyond 5% of FCT, job time within 10%)"
    )


def test_busbw_20_percent_lower_is_a_deviation() -> None:
    result = compare_runs(tables(busbws_gbps=(8.0, 9.6, 11.2)), tables())
    row = result["by_collective"]["ALL_REDUCE"]
    assert row["busbw_mean_ratio"] == pytest.approx(0.8)
    assert row["busbw_cv"][0] == pytest.approx(row["busbw_cv"][1])  # only the level moved
    assert result["deviations"] == [
        "ALL_REDUCE: busbw mean 9.60 GB/s vs reference 12.00 GB/s: ratio 0.800, off by 0.200 > 0.10"
    ]
    assert reference_lines(result)[-1] == "deviation: " + result["deviations"][0]
    # A wider bound accepts it; 5% lower stays within the default one.
    assert (
        compare_runs(tables((8.0, 9.6, 11.2)), tables(), ReferenceBounds(0.25))["deviations"] == []
    )
    assert compare_runs(tables((9.5, 11.4, 13.3)), tables())["deviations"] == []


def test_cv_and_fct_deviations_and_unfinished_flows_left_out() -> None:
    run = tables(busbws_gbps=(10.0, 12.0, 14.0), fcts_ms=(3.0, 4.0, 5.0, 6.0) * 10 + (None,))
    reference = tables(busbws_gbps=(12.0, 12.0, 12.0), fcts_ms=(1.0, 2.0, 3.0, 4.0) * 10)
    result = compare_runs(run, reference)
    row = result["by_collective"]["ALL_REDUCE"]
    assert row["busbw_mean_ratio"] == pytest.approx(1.0)
    assert row["fct_count"] == [40, 40]
    assert row["fct_ks_distance"] == pytest.approx(0.5)  # at 2 ms: 0 vs 1/2; at 4 ms: 1/2 vs 1
    # 40 and 40 flows tell 0.304 from chance at 95% (Smirnov: 1.358 x sqrt(80 / 1600))
    assert row["fct_ks_noise"] == pytest.approx(1.358 * math.sqrt(80 / 1600), abs=1e-3)
    assert row["cnps"][0] == sum(range(1, 42))  # an unfinished flow's CNPs still count
    assert result["deviations"] == [
        "ALL_REDUCE: busbw CV 0.136 vs reference 0.000: differ by 0.136 > 0.10",
        "ALL_REDUCE: FCT distributions (40 vs 40 flows): KS distance 0.500 beyond 5% of FCT > "
        "0.25, and > 0.304, what the two samples tell from chance (95%)",
        # its last flow ends 2 ms later: the job took 1.5 times as long
        "job time 6.000 ms vs reference 4.000 ms: ratio 1.500, off by 0.500 > 0.10",
    ]
    # the same distance over 4 and 4 flows is within what chance gives them (0.960)
    few = compare_runs(tables(fcts_ms=(3.0, 4.0, 5.0, 6.0)), tables())
    assert few["by_collective"]["ALL_REDUCE"]["fct_ks_distance"] == pytest.approx(0.5)
    assert not any("FCT distributions" in d for d in few["deviations"])


def test_the_ks_noise_is_smirnovs_critical_value() -> None:
    from collectors.reference import ks_noise

    # c(0.05) = 1.358 and c(0.01) = 1.628 (the two-sample KS tables' asymptotic values)
    assert ks_noise(1_000_000, 1_000_000) == pytest.approx(1.358 * math.sqrt(2e-6), rel=1e-3)
    assert ks_noise(100, 100, alpha=0.01) == pytest.approx(1.628 * math.sqrt(0.02), rel=1e-3)
    assert ks_noise(32, 32) == pytest.approx(0.3395, abs=1e-3)
    assert ks_noise(0, 5) is None


def test_the_reference_draws_spread_widens_a_bound_only_as_far_as_they_read() -> None:
    # The reference's FCTs are 1-4 ms; its other draws read 2-5 ms (KS 0.25 against it) and
    # 3-6 ms (KS 0.5); busbw 10% and 20% above. A run at 3-6 ms with busbw 15% above is then
    # within what the model reads against itself; one at 5-8 ms (KS 1.0) is beyond it.
    reference = tables()
    draws = [
        tables(busbws_gbps=(11.0, 13.2, 15.4), fcts_ms=(2.0, 3.0, 4.0, 5.0)),
        tables(busbws_gbps=(12.0, 14.4, 16.8), fcts_ms=(3.0, 4.0, 5.0, 6.0)),
    ]
    run = tables(busbws_gbps=(11.5, 13.8, 16.1), fcts_ms=(3.0, 4.0, 5.0, 6.0))
    alone = compare_runs(run, reference)
    # busbw 1.15 and job time 1.5 beyond the bounds (KS 0.5 over 4 and 4 flows: within chance)
    assert len(alone["deviations"]) == 2
    within = compare_runs(run, reference, draws=draws)
    spread = within["by_collective"]["ALL_REDUCE"]["model_spread"]
    assert spread["draws"] == 2
    assert spread["busbw_mean_ratio"] == pytest.approx(0.2)
    assert spread["ks_distance"] == pytest.approx(0.5)
    assert spread["busbw_cv_abs"] == pytest.approx(0.0)
    assert within["deviations"] == [] and within["reference_draws"] == 3
    lines = reference_lines(within)
    assert "1.150 (±0.200)" in lines[2] and "0.500 (0.500)" in lines[2]
    assert lines[3] == "job time run/ref 6.000/4.000 ms, ratio 1.500 (±0.500)"
    assert lines[4].startswith("(in parentheses: the most the simulation's 2 other draws")
    beyond = compare_runs(tables(fcts_ms=(5.0, 6.0, 7.0, 8.0)), reference, draws=draws)
    assert beyond["deviations"] == [
        "ALL_REDUCE: FCT distributions (4 vs 4 flows): KS distance 1.000 beyond 5% of FCT "
        "> 0.25 and > 0.500, the reference's own draws' largest, and > 0.960, what the two "
        "samples tell from chance (95%)",
        "job time 8.000 ms vs reference 4.000 ms: ratio 2.000, off by 1.000 > 0.10 and > 0.500, "
        "the reference's own draws' largest",
    ]
    # without draws nothing changes: no spread, the stated bounds alone
    assert alone["by_collective"]["ALL_REDUCE"]["model_spread"] is None
    assert alone["reference_draws"] == 1


def test_the_job_time_is_held_against_the_reference_and_its_draws() -> None:
    """The job time (first start to last end) deviates beyond 10% of the reference's, and
    beyond the most any of the reference's other draws reads against it."""
    reference = tables(fcts_ms=(1.0, 2.0, 3.0, 10.0))  # 10 ms
    assert compare_runs(tables(fcts_ms=(1.0, 2.0, 3.0, 10.8)), reference)["deviations"] == []
    late = compare_runs(tables(fcts_ms=(1.0, 2.0, 3.0, 12.0)), reference)
    assert late["job_time"]["ratio"] == pytest.approx(1.2)
    assert late["deviations"] == [
        "job time 12.000 ms vs reference 10.000 ms: ratio 1.200, off by 0.200 > 0.10"
    ]
    # a draw of the reference that itself took 13 ms: 1.2 is within the model's own spread
    draws = [tables(fcts_ms=(1.0, 2.0, 3.0, 13.0))]
    within = compare_runs(tables(fcts_ms=(1.0, 2.0, 3.0, 12.0)), reference, draws=draws)
    assert within["job_time"]["model_spread"] == pytest.approx(0.3)
    assert within["deviations"] == []


def test_a_type_in_one_run_only_is_reported() -> None:
    result = compare_runs(tables(extra_type=True), tables())
    assert result["deviations"] == [
        "ALL_TO_ALL: present in one run only (missing in the reference)",
        "job time 7.000 ms vs reference 4.000 ms: ratio 1.750, off by 0.750 > 0.10",
    ]
    row = result["by_collective"]["ALL_TO_ALL"]
    assert row["busbw_mean_gbps"] == [pytest.approx(5.0), None]
    assert row["busbw_mean_ratio"] is None and row["fct_ks_distance"] is None
    assert row["fct_count"] == [1, 0] and row["cnps"] == [9, None]
    backwards = compare_runs(tables(), tables(extra_type=True))
    assert backwards["deviations"][0] == "ALL_TO_ALL: present in one run only (missing in the run)"
    (line,) = [x for x in reference_lines(result) if x.startswith("ALL_TO_ALL")]
    assert line.split() == ["ALL_TO_ALL", "5.00/-", "-", "-/-", "-", "9/-", "11/-"]


def test_unmeasurable_values_are_none_and_named() -> None:
    # One complete instance has no CV, a run without a finished flow no FCT distribution.
    result = compare_runs(tables(busbws_gbps=(10.0,), fcts_ms=(None,)), tables(busbws_gbps=(10.0,)))
    row = result["by_collective"]["ALL_REDUCE"]
    assert row["busbw_cv"] == [None, None]
    assert row["fct_ks_distance"] is None and row["fct_count"] == [0, 4]
    assert result["deviations"] == []
    assert result["not_measured"] == ["ALL_REDUCE busbw CV", "ALL_REDUCE FCT", "job time"]
    lines = reference_lines(result)
    assert lines[-2].endswith("job time within 10%) where measured")
    assert lines[-1] == "not measured in both: ALL_REDUCE busbw CV, ALL_REDUCE FCT, job time"
    zero = compare_runs(tables(busbws_gbps=(0.0,)), tables(busbws_gbps=(0.0,)))
    assert zero["by_collective"]["ALL_REDUCE"]["busbw_mean_ratio"] is None  # no division by 0
    assert reference_lines(compare_runs(RunTables.from_rows(), RunTables.from_rows()))[-1] == (
        "nothing to compare: neither run has a collective"
    )


def test_compare_with_two_folders_adds_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from collectors.results import ResultsWriter
    from collectors.summary import RunMeta
    from emulator.cli import main

    folders = []
    for name, busbws in (("emulated", (8.0, 9.6, 11.2)), ("simulated", (10.0, 12.0, 14.0))):
        meta = RunMeta(name, 1.0, "phantom", "clos")
        ResultsWriter(tmp_path / name, render_plots=False).write(meta, tables(busbws), False)
        folders.append(str(tmp_path / name))
    out = ["--out", str(tmp_path / "cmp")]
    assert main(["compare", *folders, *out, "--json"]) == 0
    reference = json.loads(capsys.readouterr().out)["reference"]
    assert reference["by_collective"]["ALL_REDUCE"]["busbw_mean_ratio"] == pytest.approx(0.8)
    assert main(["compare", *folders, *out]) == 0
    text = capsys.readouterr().out
    section = text.split("second folder as the reference:\n")[1].split("\n\nplots:")[0]
    assert section.splitlines() == reference_lines(reference)
    assert main(["compare", folders[0], *out, "--json"]) == 0
    assert "reference" not in json.loads(capsys.readouterr().out)


def test_draw_folders_are_where_draw_folder_writes_them_in_number_order(tmp_path: Path) -> None:
    ref = tmp_path / "run-reference-sim"
    assert draw_folder(ref, 0) == ref and draw_folders(ref) == []
    for n in (10, 2, 1):
        draw_folder(ref, n).mkdir(parents=True)
    (ref / "draws" / "notes").mkdir()  # not a draw
    assert draw_folders(ref) == [draw_folder(ref, n) for n in (1, 2, 10)]
