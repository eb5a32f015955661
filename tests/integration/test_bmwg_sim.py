"""`emulate bmwg PROCEDURE SCENARIO` on the packet simulator, end to end: every procedure runs
its trials, measures what the draft asks, and writes the report with the draft's sections; the
numbers show what each procedure exists to show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import main
from emulator.studies.bmwg.runner import BmwgSettings, run_bmwg

CLOS = """\
name: bmwg_small
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
  pfc: true
traffic:
  - {name: x, kind: pairs, pairs: [[0, 4]], bytes_per_pair: 1000}
run:
  backend: sim
"""


def scenario(tmp_path: Path, text: str = CLOS) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    return path


def rows_of(tmp_path: Path, name: str, *params: str, text: str = CLOS) -> dict[str, Any]:
    result = run_bmwg(
        name,
        scenario(tmp_path, text),
        tmp_path / name,
        BmwgSettings(repeats=1, progress=False, params=params),
    )
    return {row["trial"]: row for row in result.document["results"]["rows"]}


def test_the_report_has_the_drafts_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "incast"
    code = main(
        [
            "bmwg",
            "pfc-incast",
            str(scenario(tmp_path)),
            "--param",
            "n=2,4",
            "--param",
            "duration_us=200",
            "--repeats",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "BMWG pfc-incast (section 7.2" in printed and "judges nothing" in printed
    document = json.loads((out / "bmwg.json").read_text())
    for key in (
        "device_identification",
        "topology",
        "test_configuration",
        "host_configuration",
        "results",
        "anomalies",
        "repeatability",
        "comparability",
    ):
        assert document[key] is not None, key
    assert document["topology"]["draft_topology"].startswith("A: 2-tier")
    assert document["test_configuration"]["fabric"]["pfc"] is True
    rows = document["results"]["rows"]
    assert [r["N"] for r in rows] == [2, 4] and all(r["repeats"] == 2 for r in rows)
    assert all(80 < r["goodput_gbps"] <= 100 for r in rows)
    # the ratios asked all fit the fabric's 7 senders: nothing left out
    assert not any("left out" in d for d in document["deviations_from_the_draft"])
    page = (out / "report.html").read_text()
    for title in (
        "1. Device identification",
        "2. Test topology",
        "3. Test configuration",
        "4. Host configuration",
        "5. Test results",
        "6. Anomalies",
        "7. Repeatability statement",
        "Comparability statement",
    ):
        assert title in page
    assert len(document["results"]["runs"]) == 4


def test_the_draft_incast_ratios_past_the_fabric_are_named(tmp_path: Path) -> None:
    result = run_bmwg(
        "pfc-incast",
        scenario(tmp_path),
        tmp_path / "n",
        BmwgSettings(repeats=1, progress=False, params=("n=2,16", "duration_us=100")),
    )
    assert (
        "incast ratios [16] left out: the fabric has room for 7 at most"
        in (result.document["deviations_from_the_draft"])
    )


def test_convergence_with_two_and_two_flows(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, "dcqcn-convergence", "m=2", "trial_us=6000")
    m2 = rows["m2"]
    assert m2["converged"] == 1.0 and 0 < m2["convergence_us"] < 5500
    assert m2["fair_share_gbps"] == pytest.approx(100 * 4096 / 4178 / 4)
    assert m2["jfi_end"] > 0.99


def test_burst_absorption_finds_the_longest_lossless_burst(tmp_path: Path) -> None:
    lossy = CLOS.replace("  pfc: true\n", "  pfc: false\n  leaf: {buffer_bytes: 200000}\n")
    rows = rows_of(tmp_path, "burst-absorption", "n=2", text=lossy)
    n2 = rows["n2"]
    # two line-rate bursts of B frames into one port: it sends B while 2B arrive, so B wait;
    # 200 kB holds about 195 frames of 1024 bytes
    assert 160 <= n2["capacity_frames"] < n2["first_loss_frames"] <= 200
    assert n2["first_loss_frames"] - n2["capacity_frames"] <= max(1, n2["capacity_frames"] // 32)
    assert n2["capacity_bytes"] == n2["capacity_frames"] * 1024


def test_ecn_marking_follows_the_thresholds(tmp_path: Path) -> None:
    row = rows_of(tmp_path, "ecn-marking", "thresholds_kb=100")["t100kb"]
    assert row["marked_below_kmin"] == 0.0 and row["marked_above_kmax"] == 1.0
    assert abs(row["deviation_percent"]) <= 20 and row["max_queue_bytes"] > 200_000


def test_spraying_spreads_and_go_back_n_pays_for_it(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, "packet-spray", "bytes_per_pair_kb=1024")
    ecmp, selective, gbn = rows["ecmp"], rows["spray-selective"], rows["spray-go_back_n"]
    assert selective["mmr_leaf_up"] < ecmp["mmr_leaf_up"] and selective["retx_per_s"] == 0
    assert selective["jfi_leaf_up"] > 0.99 and selective["ooo_per_s"] > 0
    # go-back-N resends what arrives out of order: judged (what the trial measures), slower
    assert gbn["judged"] == 1 and gbn["retx_per_s"] > 0
    assert gbn["goodput_vs_ecmp_percent"] < 0 < selective["goodput_vs_ecmp_percent"]


def test_ecmp_entropy_and_flowlets(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, "ecmp-entropy", "qps=1,4", "bytes_per_pair_kb=1024")
    assert rows["q4"]["mmr_leaf_up"] < rows["q1"]["mmr_leaf_up"]
    flowlet = rows_of(tmp_path / "f", "flowlet", "gaps_us=4", "bytes_per_pair_kb=1024")
    assert set(flowlet) == {"ecmp", "flowlet-4us"}
    assert flowlet["flowlet-4us"]["mmr_leaf_up"] <= flowlet["ecmp"]["mmr_leaf_up"]


def test_a_link_failure_iteration_against_the_steady_p99(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, "link-failure", "size_mb=4", "iterations=5", "fail_iteration=2")
    steady, failure = rows["steady"], rows["failure"]
    assert steady["steady_p99_us"] > 0 and failure["failure_iteration_us"] > 0
    assert failure["overhead_percent"] == pytest.approx(
        (failure["failure_iteration_us"] / steady["steady_p99_us"] - 1) * 100
    )
    assert failure["zero_impact"] == (failure["failure_iteration_us"] <= steady["steady_p99_us"])
    # the uplink the steady run loaded most
    assert failure["run"].startswith("l0-s") or failure["run"].startswith("l1-s")
    assert failure["run"].endswith(" down at iteration 2")
    # the All-Reduce's BusBW (2(n-1)/n) below line rate, the JCT above its roofline
    assert 0 < steady["busbw_gbps"] <= 100 and steady["jct_ratio"] >= 1.0
    assert failure["jct_ratio"] > steady["jct_ratio"] * 0.99


def test_multi_tenant_interference_grows_with_the_shared_spine_links(tmp_path: Path) -> None:
    text = CLOS.replace("  spines: 2\n", "  spines: 2\n  parallel_links: 2\n")
    rows = rows_of(
        tmp_path, "multi-tenant", "overlap_percent=0,50", "bytes_per_pair_kb=1024", text=text
    )
    disjoint, half = rows["o0"], rows["o50"]
    # apart, each job runs as alone; sharing one of its two spine links, one of its two flows
    # gets half a link, so the job takes about twice as long
    assert disjoint["interference_a"] == pytest.approx(1.0, abs=0.02)
    assert disjoint["interference_b"] == pytest.approx(1.0, abs=0.02)
    assert 1.7 < half["interference_a"] < 2.3 and 1.7 < half["interference_b"] < 2.3


def test_bad_input_is_one_line_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = scenario(tmp_path)
    out = tmp_path / "report"
    cases = [
        (["bmwg", "pfc-incast", str(tmp_path / "missing.yaml")], "missing.yaml: no such scenario"),
        (["bmwg", "nope", str(path)], "bmwg nope: not a procedure; one of burst-absorption"),
        (["bmwg", "pfc-incast", str(path), "--param", "x=1"], "--param x=1: pfc-incast takes"),
        (["bmwg", "pfc-incast", str(path), "--param", "n=two"], "--param n=two: expected int"),
        (["bmwg", "pfc-incast", str(path), "--repeats", "0"], "--repeats 0: must be at least 1"),
        # the first trials are loaded before anything runs: a frame past the fabric's MTU
        (
            ["bmwg", "burst-absorption", str(path), "--param", "frame_bytes=9300"],
            "frame_bytes",
        ),
        # the simulator takes no time dilation
        (["bmwg", "pfc-incast", str(path), "--tdf", "100"], "tdf"),
    ]
    for argv, message in cases:
        assert main([*argv, "--out", str(out), "--no-progress"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
        assert not out.exists(), argv
