"""The BMWG procedures' arithmetic (emulator.studies.bmwg): the KPIs as the drafts define them,
the convergence rule, the burst search, marking against queue depth, the parameters and the
refusals; each against hand-computed cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.errors import InputError
from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun, params_of
from emulator.studies.bmwg.congestion import (
    convergence_s,
    payload_rate_bps,
    senders_for,
)
from emulator.studies.bmwg.kpis import RunData, cv, jfi, mmr, percentile, windowed_rates
from emulator.studies.bmwg.registry import PROCEDURES, procedure
from emulator.studies.bmwg.thresholds import marking_by_depth, next_burst, search_state

CLOS = """\
name: b
fabric: {kind: clos, hosts_per_leaf: 4, leaves: 2, spines: 2, host_link_gbps: 100}
traffic:
  - {name: x, kind: pairs, pairs: [[0, 4]], bytes_per_pair: 1000}
"""


def base(tmp_path: Path, text: str = CLOS) -> Base:
    path = tmp_path / "b.yaml"
    path.write_text(text)
    return Base.read(path)


def test_jains_index_and_the_max_to_mean_ratio() -> None:
    # (sum x)^2 / (n sum x^2): equal loads 1, one link of four carrying all 1/4 (Jain 1984)
    assert jfi([5, 5, 5, 5]) == 1.0 and jfi([8, 0, 0, 0]) == 0.25
    assert jfi([1, 2, 3]) == pytest.approx(36 / 42)
    assert mmr([8, 0, 0, 0]) == 4.0 and mmr([2, 2]) == 1.0 and mmr([0, 0]) is None
    # population standard deviation over the mean
    assert cv([1.0, 3.0]) == pytest.approx(0.5) and cv([2.0]) is None
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99) == 10
    assert percentile([1, 2, 3, 4], 50) == 2


def test_convergence_is_the_last_exit_from_the_band_with_samples_after() -> None:
    fair = 10.0
    series = {
        "a": [(1.0, 20.0), (2.0, 10.5), (3.0, 9.5), (4.0, 10.0)],
        "b": [(1.0, 5.0), (2.5, 8.0), (3.5, 10.9), (4.0, 10.0)],
    }
    # b leaves the +-10% band last at 2.5; both have samples after it
    assert convergence_s(series, 0.5, fair, 0.1) == 2.5
    # a flow out of the band at its last sample never converged
    series["a"].append((5.0, 12.0))
    assert convergence_s(series, 0.5, fair, 0.1) is None
    # samples before T0 do not count
    assert convergence_s({"a": [(0.2, 50.0), (1.0, 10.0)]}, 0.5, fair, 0.1) == 0.5


def test_windowed_rates_spread_each_message_over_its_own_time(tmp_path: Path) -> None:
    flows = [
        # QP (0, 1, 0, 9): 1000 bytes over [0, 10 us], then 1000 over [10, 20 us]
        {
            "src_rank": 0,
            "dst_rank": 1,
            "qp": 0,
            "udp_sport": 9,
            "bytes": 1000,
            "start_s": 0.0,
            "end_s": 10e-6,
        },
        {
            "src_rank": 0,
            "dst_rank": 1,
            "qp": 0,
            "udp_sport": 9,
            "bytes": 1000,
            "start_s": 5e-6,
            "end_s": 20e-6,
        },
    ]
    run = RunData(tmp_path, {}, flows)
    ((key, rates),) = windowed_rates(run, 0.0, 20e-6, 10e-6).items()
    assert key == (0, 1, 0, 9)
    # windows (0,10], (5,15], (10,20]: 1000 bytes each (half of each message in the middle)
    assert [t for t, _ in rates] == pytest.approx([10e-6, 15e-6, 20e-6])
    assert [r for _, r in rates] == pytest.approx([8e8, 8e8, 8e8])


def test_the_fair_share_counts_what_a_packet_carries_beyond_its_payload(tmp_path: Path) -> None:
    b = base(tmp_path)
    # 4096 payload bytes per 4178 on the wire (BTH, ICRC, UDP, IPv4, Ethernet, FCS, gap)
    assert payload_rate_bps(b) == pytest.approx(100e9 * 4096 / 4178)
    # 8 ranks, the receiver the last: 6 flows from 6 ranks, 8 from 4 ranks x 2 QPs
    assert senders_for(b, 6) == ([0, 1, 2, 3, 4, 5], 1)
    assert senders_for(b, 8) == ([0, 1, 2, 3], 2)
    assert senders_for(b, 2, skip=6) == ([6, 0], 1)


def _run(tmp_path: Path, n: int, burst: int, lost: int, verdict: str = "ok") -> TrialRun:
    trial = Trial(f"n{n}-b{burst}", {"N": n, "burst_frames": burst}, {})
    summary = {"fidelity": {"verdict": verdict, "reasons": ["late"] if verdict != "ok" else []}}
    return TrialRun(trial, 0, RunData(tmp_path, summary), {"frames_lost": lost})


def test_the_burst_search_doubles_then_bisects(tmp_path: Path) -> None:
    params: dict[str, Any] = {"start_frames": 16, "max_frames": 4096}
    assert next_burst(search_state([], 2), params) == 16
    done = [_run(tmp_path, 2, 16, 0), _run(tmp_path, 2, 32, 0)]
    assert next_burst(search_state(done, 2), params) == 64
    done.append(_run(tmp_path, 2, 64, 3))
    assert search_state(done, 2) == (32, 64, None)
    assert next_burst(search_state(done, 2), params) == 48
    # settled within 3% (32 // 32 = 1 frame here): 32 lossless, 33 lossy
    assert next_burst((32, 33, None), params) is None
    # no loss up to the largest burst: done
    assert next_burst((4096, None, None), params) is None
    # a flagged run stops the search (the machine, not the fabric, decided it)
    done.append(_run(tmp_path, 2, 48, 0, verdict="degraded"))
    state = search_state(done, 2)
    assert state[2] is not None and "burst 48" in state[2]
    assert next_burst(state, params) is None


def test_marking_against_queue_depth_bins_each_interval_by_its_mean_depth() -> None:
    def row(t: float, packets: int, marks: int, queue: int) -> dict[str, Any]:
        return {
            "switch": "l1",
            "port": "l1-h7",
            "time_s": t,
            "tx_packets": packets,
            "ecn_marks": marks,
            "queue_bytes": queue,
        }

    rows = [row(0, 0, 0, 0), row(1, 100, 0, 800), row(2, 200, 50, 1200), row(3, 300, 150, 2600)]
    # another port with a smaller queue is ignored
    rows.append({**row(1, 10, 10, 10), "port": "other"})
    bins = marking_by_depth(rows, 1000)
    # intervals' mean depths 400, 1000, 1900 -> bins of 100 bytes centred at 450, 1050, 1950
    assert bins == {450.0: (0.0, 100), 1050.0: (0.5, 100), 1950.0: (1.0, 100)}


def test_parameters_take_lists_and_refuse_unknown_keys() -> None:
    declared = (Param("n", (2, 4), "ratios"), Param("duration_us", 1000.0, "time"))
    assert params_of(declared, ["n=8,16", "duration_us=50"], "p") == {
        "n": (8, 16),
        "duration_us": 50.0,
    }
    with pytest.raises(InputError, match="--param m=3: p takes KEY=VALUE with KEY one of n"):
        params_of(declared, ["m=3"], "p")
    with pytest.raises(InputError, match="--param n=x: expected int values, comma-separated"):
        params_of(declared, ["n=x"], "p")
    with pytest.raises(InputError, match="not a procedure; one of burst-absorption"):
        procedure("nope")


def test_every_procedure_names_its_draft_section_and_kpis() -> None:
    for name, p in PROCEDURES.items():
        assert p.name == name and p.section and p.title and p.objective
        assert p.primary in {k for k, _ in p.kpis}


def test_procedures_that_change_the_fabric_refuse_a_switch_under_test(tmp_path: Path) -> None:
    dut = base(
        tmp_path,
        "fabric: {kind: dut, interfaces: [a, b], addresses: [10.0.0.1/24, 10.0.1.1/24], "
        "allowlist: [10.0.0.0/16]}\n"
        "traffic:\n  - {name: x, kind: pairs, pairs: [[0, 1]], bytes_per_pair: 1000}\n",
    )
    assert dut.dut and dut.ranks == 2
    for name in ("ecn-marking", "flowlet", "packet-spray", "link-failure"):
        with pytest.raises(InputError, match=f"bmwg {name}: not toward a switch under test"):
            procedure(name).check(dut, {})
    procedure("pfc-incast").check(dut, {})


def test_what_did_not_settle_is_an_anomaly(tmp_path: Path) -> None:
    b = base(tmp_path)
    convergence = procedure("dcqcn-convergence")
    params = {"t0_us": 500.0, "trial_us": 3000.0, "m": (4,)}
    assert convergence.anomalies(b, params, [{"M": 4, "converged": 1 / 3}]) == [
        "M = 4: in 67% of the repeats the 2M flows were not all within the band by the end of "
        "the trial (2500 us after T0; a longer --param trial_us may see it); convergence_us is "
        "the mean of those that were"
    ]
    assert convergence.anomalies(b, params, [{"M": 4, "converged": 1.0}]) == []
    assert "M = 256 not run (--param m=...,256 runs it)" in convergence.deviations(b, params, 3)
    ecn = procedure("ecn-marking")
    rows = [{"T_bytes": 1000, "max_queue_bytes": 1500.0}, {"T_bytes": 10, "max_queue_bytes": 50}]
    (line,) = ecn.anomalies(b, {}, rows)
    assert line.startswith("T = 1000 bytes: the queue reached 1500 bytes, not past Kmax")
    failure = procedure("link-failure")
    assert failure.anomalies(b, {"fail_iteration": 3}, [{"trial": "steady"}]) == [
        "the failure run did not run: the steady run did not finish iteration 3, or crossed no "
        "spine link (see its folder)"
    ]


def test_source_ports_place_each_job_on_its_spine_links(tmp_path: Path) -> None:
    from emulator.studies.bmwg.tenants import MultiTenant, Placement, _slot

    assert _slot("l0-s1-2", "s1") == ("s1", 2) and _slot("l0-s1", "s1") == ("s1", 0)
    b = base(
        tmp_path,
        CLOS.replace("spines: 2,", "spines: 2, parallel_links: 2,"),
    )
    placement = Placement(b)
    assert placement.slots == [("s0", 0), ("s0", 1), ("s1", 0), ("s1", 1)]
    tenants = MultiTenant()
    job_a, job_b = tenants._plan(b, placement, 1 << 20, 50)
    # job a on the first two spine links, job b on the second and third: one shared (50%)
    for patterns, own in ((job_a, placement.slots[:2]), (job_b, placement.slots[1:3])):
        for i, p in enumerate(patterns):
            (src, dst), (sport,) = p["pairs"][0], p["qp_udp_sport"]
            up, down = placement.spine_slots(src, dst, sport) or ((), ())
            assert up == down == own[i % 2]
    trials = tenants.trials(b, {"overlap_percent": (0, 25), "bytes_per_pair_kb": 64}, [])
    assert [t.name for t in trials] == [
        "o0-alone-a",
        "o0-alone-b",
        "o0-together",
        "o25-alone-a",
        "o25-alone-b",
        "o25-together",
    ]
    # 25% of two links a job is not a whole link: the table says what it made
    assert trials[3].params["actual_overlap_percent"] == 0
    rows = [{"overlap_percent": 25, "actual_overlap_percent": 0}]
    (line,) = tenants.anomalies(b, {}, rows)
    assert line.startswith("overlap 25% asked") and line.endswith("share 0%")
