"""`emulate run --seeds N`: N complete runs with run.seed, run.seed + 1, ..., and every number
pooled over them with its bootstrap interval (emulator/studies/seeds/series.py), on the simulation backend so
the runs need no root and each seed's run is exactly what a single run with that seed gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import main
from tests.integration.test_sim_backend import SMALL

# the simulation backend test's small MoE job (8 hosts, both collective types), seed 11
SCENARIO = SMALL.format(seed=11)


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # a simulation needs no root
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO)
    return path


def _summary(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "summary.json").read_text())


def _tables_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.parquet"))}


def test_seeds_run_each_seed_in_its_folder_and_pool_every_instance(
    scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "seeds"
    assert main(["run", str(scenario), "--seeds", "3", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    folders = [out / f"seed-{s}" for s in (11, 12, 13)]
    summaries = [_summary(f) for f in folders]
    assert [s["seed"] for s in summaries] == [11, 12, 13]
    # another seed is another draw (source ports, so ECMP paths): the runs are not copies
    assert len({json.dumps(s["collectives"], sort_keys=True) for s in summaries}) == 3

    document = json.loads((out / "seeds.json").read_text())
    assert document["seeds"] == [11, 12, 13] and document["backend"] == "sim"
    assert (out / "seeds.txt").read_text().strip() in printed
    for ctype in ("ALL_REDUCE", "ALL_TO_ALL"):
        busbw = document["estimates"][ctype]["busbw_mean_bytes_per_s"]
        # the point is the mean over every complete instance of every seed: the runs' own means
        # weighted by their instance counts
        stats = [s["collectives"][ctype] for s in summaries]
        pooled = sum(c["busbw_mean_bytes_per_s"] * c["instances_complete"] for c in stats) / sum(
            c["instances_complete"] for c in stats
        )
        assert busbw["point"] == pytest.approx(pooled, rel=1e-12)
        assert busbw["seeds"] == 3 and busbw["units"] == sum(c["instances_complete"] for c in stats)
        low, high = busbw["ci"]
        assert low <= busbw["point"] <= high and low < high
        fct = document["estimates"][ctype]["fct_p99_s"]
        assert fct["units"] == sum(c["flows_finished"] for c in stats)
        assert fct["ci"][0] <= fct["point"] <= fct["ci"][1]
    job = document["estimates"]["run"]["job_time_s"]
    times = [s["job_time_s"] for s in summaries]
    assert job["units"] == 3 and job["point"] == pytest.approx(sum(times) / 3)
    assert min(times) <= job["ci"][0] <= job["ci"][1] <= max(times)

    # each seed's folder is what one run with that seed writes (the simulation is deterministic)
    single = tmp_path / "single"
    scenario.write_text(SCENARIO.replace("seed: 11", "seed: 12"))
    assert main(["run", str(scenario), "--out", str(single), "--no-progress"]) == 0
    assert _tables_bytes(single) == _tables_bytes(folders[1])


def test_one_seed_has_no_interval_for_a_per_run_number(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    assert main(["run", str(scenario), "--seeds", "1", "--out", str(out), "--no-progress"]) == 0
    document = json.loads((out / "seeds.json").read_text())
    assert document["estimates"]["run"]["job_time_s"]["ci"] is None
    assert document["estimates"]["ALL_REDUCE"]["busbw_mean_bytes_per_s"]["ci"] is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "0"], "--seeds 0: must be at least 1"),
        (["--seeds", "2", "--out", "{nonempty}"], "exists and is not empty"),
    ],
)
def test_bad_seeds_arguments_are_refused_before_any_run(
    scenario: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    nonempty = tmp_path / "busy"
    nonempty.mkdir()
    (nonempty / "keep").write_text("x")
    argv = ["run", str(scenario), *[a.format(nonempty=nonempty) for a in args], "--no-progress"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in nonempty.iterdir()) == ["keep"]
    assert not list(tmp_path.glob("*/seed-*"))
