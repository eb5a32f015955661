"""`emulate report` and `emulate compare` on synthetic results folders: exit codes, tables,
re-rendered files and comparison plots."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.csv as pacsv
import pytest
from matplotlib.image import imread

from collectors.live import RunInfo
from collectors.recorder import RunRecorder
from collectors.report import summary_table
from collectors.results import ResultsWriter
from collectors.summary import RunMeta
from emulator.cli import main
from tests.synthetic_run import synthetic_run


def make_results(folder: Path, scenario: str, seed: int) -> dict[str, object]:
    run = synthetic_run(ranks=4, iterations=3, seed=seed)
    rec = RunRecorder(
        run.flows, run.collectives, RunInfo(scenario, 10.0, "phantom", "clos"), run.line_rate_bps
    )
    rec.on_events(run.events)
    tables = rec.tables()
    meta = RunMeta(scenario, 10.0, "phantom", "clos", extra={"calibration": {"gbps": 3.5}})
    return ResultsWriter(folder, render_plots=False).write(meta, tables, partial=False)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("runs")
    make_results(base / "isolated", "isolated", seed=1)
    make_results(base / "mixed", "mixed", seed=2)
    return base / "isolated", base / "mixed"


def test_report_prints_the_table_and_rerenders(
    two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = two_runs
    written = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**written, "collectives": {}}))  # stale
    assert main(["report", str(folder), "--csv"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("scenario isolated  fabric clos  tdf 10.0  marker phantom")
    stats = written["collectives"]["ALL_REDUCE"]
    (row,) = [line for line in lines if line.startswith("ALL_REDUCE")]
    cells = row.split()
    assert cells[1] == "3"  # instances
    assert cells[2] == f"{stats['busbw_mean_bytes_per_s'] / 1e9:.2f}"
    assert cells[-1] == str(stats["cnps"])
    # The summary was recomputed from the parquet files, the extra keys kept.
    again = json.loads((folder / "summary.json").read_text())
    assert again["collectives"] == written["collectives"]
    assert again["calibration"] == {"gbps": 3.5}
    assert sorted(p.name for p in (folder / "plots").iterdir()) == [
        "busbw_per_iteration.png",
        "fct_cdf.png",
        "nic_utilization_heatmap.png",
        "switch_queue.png",
    ]
    flows_csv = pacsv.read_csv(folder / "csv" / "flows.csv")
    assert flows_csv.num_rows == 108
    # and the page, written again from them: the recomputed numbers, every plot embedded
    assert f"report: {folder / 'report.html'}" in lines
    page = (folder / "report.html").read_text()
    assert "<h1>Run report: isolated</h1>" in page and page.count("<img ") == 4
    assert f'<td class="num">{stats["busbw_mean_bytes_per_s"] / 1e9:.2f}</td>' in page


def test_report_that_cannot_write_its_page_is_an_error_of_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    make_results(folder, "run", seed=4)
    (folder / "report.html").mkdir()  # a folder where the page goes: it cannot be replaced
    assert main(["report", str(folder)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert f"{folder / 'report.html'}: cannot write the report page" in line
    assert line.endswith("summary.json and the plots were rewritten") and captured.out == ""
    assert (folder / "plots" / "fct_cdf.png").is_file()


def test_report_json(two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(two_runs[1]), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["scenario"] == "mixed" and summary["collectives"]["ALL_TO_ALL"]["instances"] == 3


def test_report_on_a_missing_or_broken_folder_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "flows.parquet").write_text("not parquet")
    assert main(["report", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "flows.parquet" in err[0]


def test_compare_side_by_side(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    iso, mixed = two_runs
    out_dir = tmp_path / "cmp"
    assert main(["compare", str(iso), str(mixed), "--out", str(out_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["collective", "run", "busbw"]
    table = lines[2 : lines.index("")]  # the reference section follows a blank line
    body = [line.split() for line in table]
    assert "second folder as the reference:" in lines
    assert [(c[0], c[1]) for c in body] == [
        ("ALL_REDUCE", "isolated"),
        ("ALL_REDUCE", "mixed"),
        ("ALL_TO_ALL", "isolated"),
        ("ALL_TO_ALL", "mixed"),
    ]
    mixed_summary = json.loads((mixed / "summary.json").read_text())["collectives"]["ALL_TO_ALL"]
    assert body[3][2] == f"{mixed_summary['busbw_mean_bytes_per_s'] / 1e9:.2f}"
    assert body[3][3] == f"{mixed_summary['busbw_cv']:.3f}"
    assert body[3][-1] == str(mixed_summary["cnps"])
    for name in ("compare_busbw_per_iteration.png", "compare_fct_cdf.png", "compare_cnps.png"):
        image = imread(out_dir / name)
        assert image.shape[1] >= 700 and image.shape[0] >= 400


def test_compare_default_out_is_beside_the_first_folder(
    two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    iso, mixed = two_runs
    assert main(["compare", str(iso), str(mixed), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["runs"]) == {"isolated", "mixed"}
    plots = [Path(p) for p in result["plots"]]
    assert all(p.is_file() for p in plots)
    assert plots[0].parent.parent == iso.resolve().parent
    assert plots[0].parent.name.startswith("compare-")


def test_compare_same_scenario_gets_distinct_labels(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    iso, _ = two_runs
    again = tmp_path / "isolated-again"
    make_results(again, "isolated", seed=1)
    assert main(["compare", str(iso), str(again), "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert "isolated (isolated)" in out and "isolated (isolated-again)" in out


def test_compare_with_a_missing_folder_is_bad_input(
    two_runs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(two_runs[0]), str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def test_report_reads_a_folder_written_before_cpu_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "old"
    make_results(folder, "old", seed=3)
    (folder / "cpu.parquet").unlink()
    assert main(["report", str(folder)]) == 0
    assert "ALL_TO_ALL" in capsys.readouterr().out


def test_summary_table_shows_latency_per_class_and_the_expectations() -> None:
    summary = {
        "scenario": "incast",
        "collectives": {},
        "engine": {
            "latency_by_class": {
                "26": {"packets": 12, "avg_us": 3.5, "p50_us": 2.9, "p99_us": 9.4, "max_us": 10.0}
            }
        },
        "expectations": [
            {"expectation": "no_loss", "status": "PASS", "detail": "0 lost"},
            {"expectation": "not ce_seen", "status": "FAIL", "detail": "5 CE"},
            {
                "expectation": "pfc_frames_received ranks 1",
                "status": "NOT APPLICABLE",
                "detail": "x",
            },
        ],
    }
    text = summary_table(summary)
    assert "  dscp 26: 12 packets, avg 3.5, p50 2.9, p99 9.4, max 10" in text
    assert "  FAIL           not ce_seen: 5 CE" in text
    assert text.splitlines()[-1] == "  1 passed, 1 failed, 1 not applicable"
    assert "expectations" not in summary_table({"scenario": "s", "collectives": {}})
