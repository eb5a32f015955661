"""Without root: run, fabric and clean say so in one line and exit 2 before touching anything;
validate, plan, generate, report and compare work. The user id is faked (os.geteuid), so this
runs anywhere; nothing here needs or uses root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.errors import EXIT_BAD_INPUT, EXIT_OK

REPO = Path(__file__).resolve().parents[2]
SCENARIO = str(REPO / "scenarios" / "moe_mix.yaml")


@pytest.fixture
def not_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # if a root check were missing, nothing may reach the real state file or results folder
    monkeypatch.setenv("CHAKRA_EMULATOR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("CHAKRA_EMULATOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["run", SCENARIO, "--no-progress"],
        ["run", "--trace", "x/y", "--no-progress"],
        ["fabric", "up", SCENARIO, "--no-cli"],
        ["clean"],
    ],
    ids=["run", "run-trace", "fabric", "clean"],
)
def test_commands_that_need_root_refuse_in_one_line(
    not_root: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a if a != "x/y" else str(not_root / "missing") for a in argv]
    assert main(argv) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "root" in err and "Traceback" not in err, err
    assert not (not_root / "state").exists() and not (not_root / "cache").exists()


def test_commands_that_do_not_need_root_work_without_it(
    not_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = not_root / "ar" / "allreduce"
    assert main(["generate", "allreduce", "--out", str(trace)]) == EXIT_OK
    assert main(["validate", str(trace)]) == EXIT_OK
    assert main(["plan", "--trace", str(trace)]) == EXIT_OK
    assert main(["plan", SCENARIO]) == EXIT_OK
    from tests.unit.test_study import STEADY_A2A, STEADY_AR, write_run

    # each is a list of repeats: one run takes the first
    run = write_run(not_root / "run", "moe_mix", STEADY_AR[0], STEADY_A2A[0])
    other = write_run(not_root / "other", "moe_mix", STEADY_AR[0], STEADY_A2A[0])
    assert main(["report", str(run), "--csv"]) == EXIT_OK
    assert main(["compare", str(run), str(other), "--out", str(not_root / "cmp")]) == EXIT_OK
    capsys.readouterr()
