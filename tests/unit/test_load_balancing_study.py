"""The load-balancing study without running anything: which tiers and transport keys each
condition sets (and that a run's scenario copy reads back as its condition), --conditions and its
errors, and the checks judged on hand-made runs with known numbers (a collapse shown, not shown
when the numbers say so, link balance missing -> not measured, runs flagged only for the resends
their condition causes judged with the flag shown)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from emulator.cli import main
from emulator.errors import InputError
from emulator.run.pipeline import scenario_text
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from emulator.studies.load_balancing import study
from emulator.studies.load_balancing.analysis import analyse
from emulator.studies.load_balancing.checks import LbThresholds, judge_checks
from emulator.studies.load_balancing.conditions import (
    BASELINE,
    CONDITIONS,
    balancing_tiers,
    clos_of,
    condition_of,
    parse_conditions,
    variant,
)
from emulator.studies.load_balancing.runs import RESEND_REASON, LbRun, transport_counters
from emulator.studies.stats.bootstrap import BootstrapSpec
from emulator.studies.stats.units import CollectiveUnits
from emulator.studies.stats.verdict import Check

FABRIC = {
    "kind": "clos",
    "hosts_per_leaf": 4,
    "leaves": 2,
    "spines": 2,
    "parallel_links": 2,
    "host_link_gbps": 100,
    "fabric_link_gbps": 100,
}
WORKLOAD = {
    "generate": {
        "kind": "moe_mix",
        "ranks": 8,
        "expert_parallel_size": 4,
        "allreduce_bytes": 1048576,
        "include_alltoall": False,
    }
}
FAST = BootstrapSpec(resamples=200)  # the verdicts here are far from their thresholds


def scenario_file(tmp_path: Path, fabric: Mapping[str, Any] = FABRIC, **more: Any) -> Path:
    doc = {"name": "lb", "workload": WORKLOAD, "fabric": dict(fabric), "run": {"backend": "sim"}}
    doc.update(more)
    path = tmp_path / "lb.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def scenario(tmp_path: Path, fabric: Mapping[str, Any] = FABRIC, **more: Any) -> Scenario:
    return load_scenario(scenario_file(tmp_path, fabric, **more))


def modes(s: Scenario) -> dict[str, str]:
    return {name: tier.load_balancing.mode for name, tier in s.fabric.tiers.items()}


# --- the conditions' overrides ------------------------------------------------------------------


def test_a_condition_sets_every_tier_with_a_choice_and_the_transport(tmp_path: Path) -> None:
    base = scenario(tmp_path)
    assert balancing_tiers(base.fabric) == ("leaf", "spine")  # spine: 2 parallel links down
    sprayed = variant(base, CONDITIONS["spray-sel"], "lb.yaml")
    assert modes(sprayed) == {"leaf": "spray", "spine": "spray", "super_spine": "ecmp"}
    assert (sprayed.transport.reliability, sprayed.transport.entropy) == ("selective", "per_qp")
    assert sprayed.name == "lb-spray-sel"
    # everything else is the scenario's
    assert sprayed.fabric.spines == base.fabric.spines and sprayed.workload == base.workload
    gbn = variant(base, CONDITIONS["flowlet-gbn"], "lb.yaml")
    assert modes(gbn)["leaf"] == "flowlet" and gbn.transport.reliability == "go_back_n"
    entropy = variant(base, CONDITIONS["entropy-sel"], "lb.yaml")
    assert set(modes(entropy).values()) == {"ecmp"}
    assert (entropy.transport.reliability, entropy.transport.entropy) == ("selective", "per_packet")


def test_the_baseline_forces_ecmp_on_a_scenario_that_balances(tmp_path: Path) -> None:
    leaf = {"load_balancing": {"mode": "spray", "spray_order": "round_robin"}}
    base = scenario(tmp_path, {**FABRIC, "leaf": leaf}, transport={"reliability": "selective"})
    baseline = variant(base, CONDITIONS[BASELINE], "lb.yaml")
    assert set(modes(baseline).values()) == {"ecmp"}
    assert baseline.transport.reliability == "go_back_n"
    # the scenario's own settings of a mode stay for the conditions that use it
    assert variant(base, CONDITIONS["spray-gbn"], "x").fabric.leaf.load_balancing.spray_order == (
        "round_robin"
    )


def test_only_tiers_with_a_choice_take_the_mode(tmp_path: Path) -> None:
    one_link = scenario(tmp_path, {**FABRIC, "parallel_links": 1})
    assert balancing_tiers(one_link.fabric) == ("leaf",)  # a spine has one link to each leaf
    assert modes(variant(one_link, CONDITIONS["adaptive-sel"], "x")) == {
        "leaf": "adaptive",
        "spine": "ecmp",
        "super_spine": "ecmp",
    }
    three = scenario(tmp_path, {**FABRIC, "parallel_links": 1, "pods": 2, "super_spines": 2})
    assert balancing_tiers(three.fabric) == ("leaf", "spine", "super_spine")
    assert set(modes(variant(three, CONDITIONS["spray-gbn"], "x")).values()) == {"spray"}


def test_a_runs_scenario_copy_reads_back_as_its_condition(tmp_path: Path) -> None:
    base = scenario(tmp_path)
    for name, condition in CONDITIONS.items():
        copy = tmp_path / f"{name}.yaml"
        copy.write_text(scenario_text(variant(base, condition, "lb.yaml")))
        assert condition_of(load_scenario(copy), copy).name == name
    with pytest.raises(InputError, match="none of the study's conditions"):
        condition_of(scenario(tmp_path, transport={"entropy": "per_packet"}), "lb.yaml")


def test_bad_fabrics_and_transports_are_refused_naming_the_key(tmp_path: Path) -> None:
    flat = scenario(tmp_path, {**FABRIC, "spines": 1, "parallel_links": 1})
    with pytest.raises(InputError, match=re.escape("lb.yaml: fabric: no switch tier has a choice")):
        clos_of(flat, "lb.yaml")
    dut = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "moe_mix_dut.yaml")
    with pytest.raises(InputError, match=re.escape("fabric.kind dut")):
        clos_of(dut, "moe_mix_dut.yaml")
    wide = scenario(tmp_path, transport={"window_packets": 4096})
    with pytest.raises(
        InputError, match=re.escape("condition spray-sel: transport.window_packets")
    ):
        variant(wide, CONDITIONS["spray-sel"], "lb.yaml")


# --- --conditions ---------------------------------------------------------------------------


def test_conditions_default_to_every_one() -> None:
    assert [c.name for c in parse_conditions(None)] == list(CONDITIONS)


def test_a_subset_keeps_the_registry_order_and_the_baseline() -> None:
    chosen = parse_conditions("spray-sel, spray-gbn")
    assert [c.name for c in chosen] == [BASELINE, "spray-gbn", "spray-sel"]
    assert [c.name for c in parse_conditions("entropy-sel")] == [BASELINE, "entropy-sel"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("spray", "--conditions spray: unknown condition 'spray' (known: ecmp-gbn,"),
        ("spray-sel,,ecmp-gbn", "an empty name"),
        ("spray-sel,spray-sel", "spray-sel is given twice"),
    ],
)
def test_bad_conditions_are_one_line_errors(text: str, said: str) -> None:
    with pytest.raises(InputError) as info:
        parse_conditions(text)
    assert said in str(info.value) and "\n" not in str(info.value)


def test_the_command_refuses_bad_input_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def never(*_: Any) -> Path:
        raise AssertionError("nothing runs on bad input")

    monkeypatch.setattr(study, "run_with_pipeline", never)
    path = scenario_file(tmp_path)
    flat = tmp_path / "flat.yaml"
    flat.write_text(
        path.read_text().replace("spines: 2", "spines: 1").replace("links: 2", "links: 1")
    )
    out = str(tmp_path / "out")
    cases = [
        (["--conditions", "ecmp-gbn,bogus"], str(path), "--conditions ecmp-gbn,bogus: unknown"),
        (["--repeats", "0"], str(path), "--repeats 0: must be at least 1"),
        (["--tdf", "10"], str(path), "runs on the sim backend: --tdf"),
        ([], str(flat), "flat.yaml: fabric: no switch tier has a choice"),
        ([], str(tmp_path / "missing.yaml"), "missing.yaml: no such scenario file"),
    ]
    for extra, scenario_path, said in cases:
        code = main(["study", "load-balancing", scenario_path, "--out", out, *extra])
        err = capsys.readouterr().err
        assert code == 2 and said in err, (extra, err)
    assert not (tmp_path / "out").exists()


def test_the_runs_are_interleaved_with_one_seed_per_repeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int, str, str | None]] = []

    def runner(s: Scenario, folder: Path, settings: study.LbSettings) -> Path:
        seen.append((folder.name, s.run.seed, s.fabric.leaf.load_balancing.mode, settings.backend))
        return folder

    def written(runs: Any, out: Path, facts: study.Facts, *rest: Any) -> Any:
        assert facts.sport_policy == "hash" and facts.tiers == ("leaf", "spine")
        return runs

    monkeypatch.setattr(study, "read_runs", lambda ran: ran)
    monkeypatch.setattr(study, "write_study", written)
    settings = study.LbSettings(backend="sim", repeats=2, progress=False)
    path = scenario_file(tmp_path, run={"backend": "sim", "seed": 7})
    ran: Any = study.run_study(path, tmp_path / "out", settings, "spray-gbn", runner=runner)
    assert seen == [
        ("ecmp-gbn-seed7", 7, "ecmp", "sim"),
        ("spray-gbn-seed7", 7, "spray", "sim"),
        ("ecmp-gbn-seed8", 8, "ecmp", "sim"),
        ("spray-gbn-seed8", 8, "spray", "sim"),
    ]
    assert [condition for condition, _, _ in ran] == [BASELINE, "spray-gbn"] * 2


# --- the checks on hand-made runs ---------------------------------------------------------------

OK = {"verdict": "ok", "reasons": []}


def run(
    condition: str,
    repeat: int,
    busbw_gbps: float,
    resent: int = 0,
    sent: int = 10_000,
    mmr: float | None = None,
    fidelity: Mapping[str, Any] = OK,
    naks: int = 0,
) -> LbRun:
    """A run with 8 All-Reduce instances around busbw_gbps (+-2%), 16 flows, and its counters
    in queue_pair_totals (the section every run has); load_balance only when mmr is given."""
    busbw = busbw_gbps * 1e9 * np.linspace(0.98, 1.02, 8)
    fct = np.linspace(100e-6, 120e-6, 16) * 10 / busbw_gbps
    summary: dict[str, Any] = {
        "fidelity": dict(fidelity),
        "partial": False,
        "job_time_s": 1e-3 * 10 / busbw_gbps,
        "queue_pair_totals": {
            "data_packets_sent": sent + resent,
            "data_packets_received": sent + resent,
            "packets_retransmitted": resent,
            "naks_sent": naks,
            "reordered_packets": resent // 2,
            "sacks_sent": 0,
            "held_out_of_order": 0,
        },
    }
    if mmr is not None:
        summary["load_balance"] = {
            "leaf_up": {"links": 4, "mmr": mmr * (1 + 0.01 * repeat), "jfi": 1 / mmr},
            "spine_down": {"links": 4, "mmr": mmr, "jfi": 1 / mmr},
        }
    units = CollectiveUnits(busbw, (), np.empty((0, 2)), fct)
    folder = Path(f"runs/{condition}-seed{repeat}")
    return LbRun(condition, folder, summary, repeat, repeat, {"ALL_REDUCE": units})


def checks_of(
    runs: list[LbRun], sport_policy: str | None = "hash", include_flagged: bool = False
) -> dict[str, Check]:
    analysis = analyse(runs, FAST, include_flagged)
    judged = judge_checks(analysis, runs, LbThresholds(), 0.95, include_flagged, sport_policy)
    return {c.name: c for c in judged}


def collapse(resent: int, spray_busbw_gbps: float, repeats: int = 3) -> list[LbRun]:
    return [
        r
        for k in range(repeats)
        for r in (
            run(BASELINE, k, 10.0 + 0.1 * k, mmr=2.0),
            run("spray-gbn", k, spray_busbw_gbps, resent=resent, mmr=1.3, naks=500),
            run("spray-sel", k, 12.0 + 0.1 * k, resent=5, mmr=1.05),
        )
    ]


def test_a_collapse_is_shown_when_resends_soar_and_busbw_falls() -> None:
    checks = checks_of(collapse(resent=80_000, spray_busbw_gbps=1.0))
    c = checks["spray_gbn_collapses"]
    assert c.verdict == "shown", c.detail
    assert c.alone == 0.0 and c.mixed == pytest.approx(80_000 / 90_000)
    assert c.ratio_undefined is not None and c.difference_ci is not None  # from a baseline of 0
    assert c.difference_ci[0] > 0
    assert c.numbers["busbw_ratio_ALL_REDUCE"] == pytest.approx(0.1, rel=0.02)
    assert "spray-gbn/ecmp-gbn busbw mean" in c.detail and "mixed" not in c.detail
    assert checks["spray_sel_removes_ecmp_imbalance"].verdict == "shown"
    assert checks["selective_resends_little:spray-sel"].verdict == "shown"
    assert checks["spray_sel_vs_hash_ecmp"].verdict == "shown"


def test_no_collapse_when_busbw_holds_or_the_resends_are_few() -> None:
    same_busbw = checks_of(collapse(resent=80_000, spray_busbw_gbps=10.1))
    assert same_busbw["spray_gbn_collapses"].verdict == "not shown"
    assert "at or below 0.9" not in same_busbw["spray_gbn_collapses"].detail
    few = checks_of(collapse(resent=20, spray_busbw_gbps=1.0))
    assert few["spray_gbn_collapses"].verdict == "not shown"
    assert "only 0.0020 of the packets sent were resent" in few["spray_gbn_collapses"].detail


def test_one_repeat_is_not_measurable() -> None:
    checks = checks_of(collapse(resent=80_000, spray_busbw_gbps=1.0, repeats=1))
    assert {c.verdict for c in checks.values()} == {"not measurable"}


def test_missing_load_balance_is_not_measured_and_nothing_is_made_up(tmp_path: Path) -> None:
    runs = collapse(resent=80_000, spray_busbw_gbps=1.0)
    bare = [
        LbRun(
            r.condition,
            r.folder,
            {k: v for k, v in r.summary.items() if k != "load_balance"},
            r.seed,
            r.repeat,
            r.units,
        )
        for r in runs
    ]
    checks = checks_of(bare)
    balance = checks["spray_sel_removes_ecmp_imbalance"]
    assert balance.verdict == "not measurable"
    assert balance.detail.startswith("not measured: no run's summary.json has a load_balance")
    assert balance.alone is None and balance.mixed is None
    assert checks["spray_gbn_collapses"].verdict == "shown"  # the rest still judged
    # and the whole study is written without it: no MMR anywhere, said so
    from emulator.studies.load_balancing.study import Facts, write_study

    (tmp_path / "study").mkdir()
    result = write_study(bare, tmp_path / "study", Facts(None, "hash", ("leaf",)), bootstrap=FAST)
    document = json.loads((tmp_path / "study" / "study.json").read_text())
    assert document["load_balance_measured"] is False
    assert all("mmr" not in c["metrics"] for c in document["conditions"].values())
    assert any("link balance not measured" in n for n in result.notes)
    assert (tmp_path / "study" / "report.html").is_file()
    assert {p.name for p in (tmp_path / "study" / "plots").iterdir()} == {
        "lb_busbw.png",
        "lb_mmr.png",
        "lb_fct_cdf.png",
    }


def test_an_imbalance_not_reduced_or_a_bandwidth_loss_is_not_shown() -> None:
    runs = [
        r
        for k in range(3)
        for r in (run(BASELINE, k, 10.0, mmr=1.02), run("spray-sel", k, 10.0, mmr=1.02))
    ]
    assert checks_of(runs)["spray_sel_removes_ecmp_imbalance"].verdict == "not shown"
    slower = [
        r
        for k in range(3)
        for r in (run(BASELINE, k, 10.0, mmr=2.0), run("spray-sel", k, 8.0, mmr=1.02))
    ]
    check = checks_of(slower)["spray_sel_removes_ecmp_imbalance"]
    assert check.verdict == "not shown" and "its interval reaches below 0.95" in check.detail


def test_selective_resending_much_is_not_little() -> None:
    runs = [r for k in range(3) for r in (run(BASELINE, k, 10), run("spray-sel", k, 9, 600))]
    check = checks_of(runs)["selective_resends_little:spray-sel"]
    assert check.verdict == "not shown" and "reaches above 0.01" in check.detail
    assert check.mixed == pytest.approx(600 / 10_600)


def test_the_port_question_needs_hashed_ports() -> None:
    runs = collapse(resent=80_000, spray_busbw_gbps=1.0)
    balanced = checks_of(runs, sport_policy="balanced")["spray_sel_vs_hash_ecmp"]
    assert balanced.verdict == "not measurable"
    assert "sport_policy is balanced, not hash" in balanced.detail
    assert balanced.ratio == pytest.approx(12.1 / 10.1, rel=0.02)  # still reported
    even = [r for k in range(3) for r in (run(BASELINE, k, 10.0), run("spray-sel", k, 10.2))]
    assert checks_of(even)["spray_sel_vs_hash_ecmp"].verdict == "not shown"


RESENDS = {"verdict": "degraded", "reasons": [f"900 {RESEND_REASON}"]}
CPU = {"verdict": "degraded", "reasons": ["an engine worker was busy 99% of the run"]}


def test_runs_flagged_only_for_the_resends_of_a_reordering_condition_are_judged() -> None:
    runs = collapse(resent=80_000, spray_busbw_gbps=1.0)
    flagged = [
        run(r.condition, r.repeat, 1.0, 80_000, mmr=1.3, fidelity=RESENDS, naks=500)
        if r.condition == "spray-gbn"
        else r
        for r in runs
    ]
    spray = [r for r in flagged if r.condition == "spray-gbn"]
    assert all(r.flags == () and r.waived for r in spray)
    check = checks_of(flagged)["spray_gbn_collapses"]
    assert check.verdict == "shown"
    assert "judged on runs flagged only for the resends their condition causes" in check.detail
    assert len(check.flagged) == 3
    # the same flag on the baseline (which keeps each flow on one path) leaves it out
    baseline = run(BASELINE, 0, 10.0, 50, fidelity=RESENDS)
    assert baseline.flags and not baseline.waived
    # and any other reason leaves a sprayed run out too
    for other in (CPU, {"verdict": "degraded", "reasons": [f"9 {RESEND_REASON}", "drops"]}):
        assert run("spray-gbn", 0, 1.0, 9, fidelity=other).flags
    every = [
        run(r.condition, r.repeat, 1.0, 80_000, fidelity=CPU) if r.condition == "spray-gbn" else r
        for r in runs
    ]
    out = checks_of(every)["spray_gbn_collapses"]
    assert out.verdict == "not measurable" and "every spray-gbn run is flagged" in out.detail


def test_counters_prefer_the_reordering_section_and_fall_back_to_the_totals() -> None:
    totals = {"packets_retransmitted": 7, "naks_sent": 3, "data_packets_sent": 100}
    assert transport_counters({"queue_pair_totals": totals})["retransmitted_packets"] == 7
    both = {"queue_pair_totals": totals, "reordering": {"retransmitted_packets": 9}}
    counters = transport_counters(both)
    assert counters["retransmitted_packets"] == 9 and counters["naks_sent"] == 3
    assert counters["data_packets_sent"] == 100 and counters["held_out_of_order"] is None
    assert transport_counters({})["naks_sent"] is None


def test_the_waived_reason_is_the_one_the_fidelity_verdict_gives() -> None:
    import types

    import pyarrow as pa

    from collectors.fidelity import CHECKS, FidelityLimits

    tables = types.SimpleNamespace(
        flows=pa.table({"retransmitted_packets": [5, 0]}), queue_pairs=pa.table({"qp": [0]})
    )
    check = CHECKS["retransmissions_in_lossless_fabric"]
    finding = check(tables, FidelityLimits())  # type: ignore[arg-type]
    assert finding.reason is not None and RESEND_REASON in finding.reason
