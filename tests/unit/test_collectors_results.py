"""The results folder: contents, summary keys and values, private modes, atomic (re)writes,
and the plots opened and checked for size and non-blank content."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from matplotlib.image import imread

import collectors.results as results_mod
from collectors.live import RunInfo
from collectors.recorder import RunRecorder
from collectors.results import ResultsWriter, default_results_dir
from collectors.summary import Fidelity, RunMeta
from collectors.tables import RunTables
from emulator.errors import InputError
from tests.synthetic_run import synthetic_run

REQUIRED_TOP = {
    "scenario",
    "tdf",
    "marker",
    "fabric",
    "fidelity",
    "job_time_s",
    "partial",
    "collectives",
}
REQUIRED_TYPE = {
    "instances",
    "busbw_mean_bytes_per_s",
    "busbw_p50_bytes_per_s",
    "busbw_p5_bytes_per_s",
    "busbw_min_bytes_per_s",
    "busbw_cv",
    "ideal_busbw_bytes_per_s",
    "fct_p50_s",
    "fct_p99_s",
    "fct_p999_s",
    "fct_max_s",
    "cnps",
}
META = RunMeta(
    "synth", 10.0, "phantom", "clos", Fidelity("degraded", ("cpu saturated 12% of samples",))
)


def recorded(events_fraction: float = 1.0, seed: int = 1) -> RunTables:
    run = synthetic_run(ranks=4, iterations=3, seed=seed)
    rec = RunRecorder(
        run.flows, run.collectives, RunInfo("synth", 10.0, "phantom", "clos"), run.line_rate_bps
    )
    rec.on_events(run.events[: int(len(run.events) * events_fraction)])
    return rec.tables()


def test_complete_folder_contents_and_summary(tmp_path: Path) -> None:
    tables = recorded()
    target = tmp_path / "results" / "synth-1"
    summary = ResultsWriter(target, scenario_text="name: synth\n").write(
        META, tables, partial=False
    )
    names = sorted(p.name for p in target.iterdir())
    assert names == [
        "collectives.parquet",
        "cpu.parquet",
        "flows.parquet",
        "nic.parquet",
        "plots",
        "ports.parquet",
        "queue_pairs.parquet",
        "scenario.yaml",
        "summary.json",
    ]
    on_disk = json.loads((target / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert set(on_disk) >= REQUIRED_TOP
    assert on_disk["partial"] is False
    # The synthetic CPU samples are uniform in 0.3..0.7.
    assert 0.3 <= on_disk["machine"]["cpu_busy_mean_ratio"] <= 0.7
    assert 0.3 <= on_disk["machine"]["cpu_busy_p95_ratio"] <= 0.7
    assert on_disk["fidelity"] == {
        "verdict": "degraded",
        "reasons": ["cpu saturated 12% of samples"],
        "unknown": [],
    }
    assert set(on_disk["collectives"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    for stats in on_disk["collectives"].values():
        assert set(stats) >= REQUIRED_TYPE
        assert stats["instances"] == 3
        assert (
            0
            < stats["busbw_min_bytes_per_s"]
            <= stats["busbw_p50_bytes_per_s"]
            <= stats["busbw_mean_bytes_per_s"] * 1.5
        )
        assert stats["busbw_mean_bytes_per_s"] < stats["ideal_busbw_bytes_per_s"]
        assert stats["fct_p50_s"] <= stats["fct_p99_s"] <= stats["fct_p999_s"] <= stats["fct_max_s"]
    # Values agree with the tables: the ALL_TO_ALL max FCT and CNP count.
    flows = pq.read_table(target / "flows.parquet").to_pylist()
    a2a = [f for f in flows if f["collective_type"] == "ALL_TO_ALL"]
    assert on_disk["collectives"]["ALL_TO_ALL"]["fct_max_s"] == max(f["fct_s"] for f in a2a)
    assert on_disk["collectives"]["ALL_TO_ALL"]["cnps"] == sum(f["cnps_sent"] for f in a2a)
    assert pq.read_table(target / "collectives.parquet").num_rows == 6
    assert pq.read_table(target / "flows.parquet").num_rows == tables.flows.num_rows
    assert pq.read_table(target / "nic.parquet").num_rows == tables.nic.num_rows > 0
    assert pq.read_table(target / "cpu.parquet").num_rows == tables.cpu.num_rows > 0
    assert (target / "scenario.yaml").read_text() == "name: synth\n"
    assert on_disk["job_time_s"] == pytest.approx(max(f["end_s"] for f in flows))


def test_files_are_private(written: Path) -> None:
    target = written
    for root, _dirs, files in os.walk(target):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600, f


def test_checkpoint_then_final_write_replaces_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "r"
    writer = ResultsWriter(target, render_plots=False)
    first = writer.write(META, recorded(0.3), partial=True)
    assert first["partial"] is True
    assert json.loads((target / "summary.json").read_text())["partial"] is True
    partial_finished = first["flows"]["finished"]
    final = writer.write(META, recorded(1.0), partial=False)
    assert final["partial"] is False and final["flows"]["finished"] > partial_finished
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temp or old folders


def test_interrupted_write_keeps_the_previous_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r"
    writer = ResultsWriter(target)
    writer.write(META, recorded(0.3), partial=True)

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(results_mod, "render_run_plots", interrupted)
    with pytest.raises(KeyboardInterrupt):
        writer.write(META, recorded(1.0), partial=False)
    # The checkpoint is still there, complete and marked partial; no temp folder is left.
    summary = json.loads((target / "summary.json").read_text())
    assert summary["partial"] is True
    assert (target / "flows.parquet").is_file() and (target / "plots" / "fct_cdf.png").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_interrupted_first_write_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(results_mod, "write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ResultsWriter(tmp_path / "r", render_plots=False).write(META, recorded(), partial=False)
    assert list(tmp_path.iterdir()) == []


def test_refuses_a_foreign_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "thesis.tex").write_text("precious")
    with pytest.raises(InputError, match="not an empty folder"):
        ResultsWriter(tmp_path / "r")
    with pytest.raises(InputError, match="not an empty folder"):
        ResultsWriter(tmp_path / "r", replace_existing=True)
    assert (tmp_path / "r" / "thesis.tex").read_text() == "precious"
    empty = tmp_path / "empty"
    empty.mkdir()
    ResultsWriter(empty, render_plots=False).write(META, recorded(), partial=False)
    assert (empty / "summary.json").is_file()


def test_empty_run_still_writes_every_table_and_plot(tmp_path: Path) -> None:
    target = tmp_path / "r"
    summary = ResultsWriter(target).write(META, RunTables.from_rows(), partial=True)
    assert summary["collectives"] == {} and summary["job_time_s"] is None
    for name in ("flows", "collectives", "nic", "ports", "cpu"):
        table = pq.read_table(target / f"{name}.parquet")
        assert table.num_rows == 0 and table.num_columns >= 2
    assert len(list((target / "plots").glob("*.png"))) == 4


def test_another_runs_folder_is_replaced_only_when_allowed(tmp_path: Path) -> None:
    target = tmp_path / "r"
    ResultsWriter(target, render_plots=False).write(META, recorded(0.5), partial=False)
    with pytest.raises(InputError, match="is a results folder"):
        ResultsWriter(target)
    summary = ResultsWriter(target, render_plots=False, replace_existing=True).write(
        META, recorded(1.0), partial=False
    )
    assert json.loads((target / "summary.json").read_text()) == json.loads(json.dumps(summary))


def test_default_folder_name(tmp_path: Path) -> None:
    when = datetime(2026, 11, 22, 6, 15, 0, tzinfo=UTC)
    first = default_results_dir(tmp_path, "moe mix/1", when)
    assert first == tmp_path / "moe_mix_1-20261122T061500Z"
    first.mkdir()
    assert (
        default_results_dir(tmp_path, "moe mix/1", when)
        == tmp_path / "moe_mix_1-20261122T061500Z-2"
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("results") / "r"
    ResultsWriter(target).write(META, recorded(), partial=False)
    return target


@pytest.mark.parametrize(
    "name",
    ["busbw_per_iteration.png", "fct_cdf.png", "nic_utilization_heatmap.png", "switch_queue.png"],
)
def test_plots_are_sized_and_not_blank(written: Path, name: str) -> None:
    image = imread(written / "plots" / name)
    height, width = image.shape[:2]
    assert width >= 800 and height >= 450
    rgb = image[..., :3].reshape(-1, 3)
    # Not blank: many distinct colours, and a good share of pixels that are not background white.
    packed = np.round(rgb * 255).astype(np.int64) @ np.array([65536, 256, 1])
    assert len(np.unique(packed)) > 50
    non_white = np.mean(np.any(rgb < 0.9, axis=1))
    assert non_white > 0.03


def test_mid_run_tables_make_a_partial_summary(tmp_path: Path) -> None:
    run = synthetic_run(ranks=4, iterations=2, seed=4)
    info = RunInfo("synth", 10.0, "phantom", "clos")
    rec = RunRecorder(run.flows, run.collectives, info, run.line_rate_bps)
    rec.on_events(run.events[: len(run.events) // 2])
    meta = RunMeta.from_info(info, job_time_s=1.5, extra={"interrupted_by": "SIGINT"})
    summary = ResultsWriter(tmp_path / "r", render_plots=False).write(
        meta, rec.tables(), partial=True
    )
    assert summary["partial"] is True and summary["job_time_s"] == 1.5
    assert summary["interrupted_by"] == "SIGINT"
    assert 0 < summary["flows"]["finished"] < summary["flows"]["planned"] == len(run.flows)
    a2a = summary["collectives"]["ALL_TO_ALL"]
    assert a2a["instances"] == 2 and a2a["instances_complete"] < 2


def test_an_older_folder_without_the_newer_queue_pair_columns_still_reads(tmp_path: Path) -> None:
    """Columns added later with a default (pattern, latency) are filled in on reading; one
    without a default is still reported missing."""
    from collectors.queue_pairs import QpRow
    from collectors.tables import read_tables, to_table, write_parquet

    counters: dict[str, Any] = {
        f: 0 for f in QpRow.__dataclass_fields__ if f not in ("pattern", "job")
    }
    counters.update(src_rank=1, udp_sport=50000, qpn=1, dscp=26, lost_packets=3)
    row = QpRow(**{k: v for k, v in counters.items() if not k.startswith("latency")})
    tables = recorded()
    target = tmp_path / "r"
    ResultsWriter(target, scenario_text="name: synth\n").write(
        META, tables.__class__(**{**tables.by_name(), "queue_pairs": to_table([row], QpRow)}), False
    )
    old = pq.read_table(target / "queue_pairs.parquet")
    old = old.drop_columns(
        [
            c
            for c in old.column_names
            if c in ("pattern", "job", "sacks_sent", "reordered_packets") or c.startswith("latency")
        ]
    )
    write_parquet(old, target / "queue_pairs.parquet")
    (back,) = read_tables(target).queue_pairs.to_pylist()
    assert back["lost_packets"] == 3 and back["pattern"] == "" and back["latency_packets"] == 0
    assert back["job"] == ""
    assert back["latency_p99_us"] is None
    assert back["sacks_sent"] == 0 and back["reordered_packets"] == 0
    write_parquet(old.drop_columns(["lost_packets"]), target / "queue_pairs.parquet")
    with pytest.raises(InputError, match="missing columns lost_packets"):
        read_tables(target)
