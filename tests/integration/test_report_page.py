"""A run's report.html is the last thing it writes, and a page that cannot be written costs the
run nothing: a warning naming the file, the results folder complete, exit 0 (a simulation, no
root). How the pages render in a browser: tests/system/test_report_html.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.cli import main
from tests.integration.test_sim_backend import SMALL


def test_a_page_that_cannot_be_written_is_a_warning_and_the_run_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def disk_full(folder: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("emulator.run.execute.write_run_report", disk_full)
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SMALL.format(seed=1))
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    page = out / "report.html"
    assert (
        f"emulate run: warning: {page}: not written (OSError: [Errno 28] No space left on "
        f"device); the other results files are complete without it; `emulate report {out}` "
        "writes it again"
    ) in captured.err.splitlines()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["flows"]["finished"] == summary["flows"]["planned"] == 128
    assert len(list((out / "plots").glob("*.png"))) >= 4 and not page.exists()
    assert f"results: {out}" in captured.out and "report:" not in captured.out
    # `emulate report` writes it afterwards, as the warning says
    monkeypatch.undo()
    assert main(["report", str(out)]) == 0
    assert "Run report: small_mix" in page.read_text()
