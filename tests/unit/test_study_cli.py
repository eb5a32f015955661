"""`emulate study interference` arguments: --repeats (default 3) and the reused folders per role
(--reuse-<role> DIR..., or the one-repeat --reuse A B C) reach the study as given; nothing runs."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from emulator.cli import main
from emulator.studies.interference import study


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments each `emulate study interference` passed to the study."""
    seen: list[dict[str, Any]] = []

    def fake(out: Path, **kwargs: Any) -> Any:
        seen.append({"out": out, **kwargs})
        return types.SimpleNamespace(text="study text", to_json=lambda: {})

    monkeypatch.setitem(study.STUDIES, "interference", fake)
    return seen


def run(*args: str) -> int:
    return main(["study", "interference", "--out", "unused", *args])


def test_repeats_default_to_three_and_are_passed(calls: list[dict[str, Any]]) -> None:
    assert run() == 0 and run("--repeats", "5") == 0 and run("--repeats", "1") == 0
    assert [c["repeats"] for c in calls] == [3, 5, 1]
    assert all(c["reuse"] is None for c in calls)


@pytest.mark.parametrize("value", ["0", "-2"])
def test_repeats_below_one_are_bad_input(
    value: str, calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--repeats", value) == 2 and calls == []
    assert f"--repeats {value}: must be at least 1" in capsys.readouterr().err


def test_repeats_must_be_a_number(
    calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        run("--repeats", "three")
    assert info.value.code == 2 and calls == []
    assert "invalid int value" in capsys.readouterr().err


def test_reuse_per_role_takes_several_folders_each(calls: list[dict[str, Any]]) -> None:
    code = run(
        "--reuse-mixed", "m1", "m2", "m3",
        "--reuse-allreduce-only", "a1", "a2",
        "--reuse-alltoall-only", "t1", "t2", "t3",
    )  # fmt: skip
    assert code == 0
    (call,) = calls
    assert call["reuse"] == {
        "allreduce_only": [Path("a1"), Path("a2")],
        "alltoall_only": [Path("t1"), Path("t2"), Path("t3")],
        "mixed": [Path("m1"), Path("m2"), Path("m3")],
    }
    assert list(call["reuse"]) == list(study.ROLES)  # role order, whatever the flags' order


def test_reuse_with_three_folders_is_one_repeat_per_role(calls: list[dict[str, Any]]) -> None:
    assert run("--reuse", "a", "t", "m") == 0
    assert calls[0]["reuse"] == {
        "allreduce_only": [Path("a")],
        "alltoall_only": [Path("t")],
        "mixed": [Path("m")],
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reuse-mixed", "m1", "m2"], "--reuse-allreduce-only, --reuse-alltoall-only: reusing"),
        (["--reuse", "a", "t", "m", "--reuse-mixed", "m2"], "not both"),
        (
            ["--reuse-allreduce-only", "a", "--reuse-alltoall-only", "t", "--reuse-mixed", "m",
             "--repeats", "2"],
            "excludes --tdf, --repeats, --scenario-set, --reference, --cluster and scenario paths",
        ),
        (["--reuse", "a", "t", "m", "--scenario-set", "ecmp"], "--scenario-set"),
        (["--reuse", "a", "t", "m", "--tdf", "10"], "excludes --tdf"),
        (["--reuse", "a", "t", "m", "--mixed", "x.yaml"], "scenario paths"),
    ],
)  # fmt: skip
def test_reuse_conflicts_are_bad_input(
    args: list[str],
    message: str,
    calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(*args) == 2 and calls == []
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_run_study_refuses_a_reuse_missing_a_role(tmp_path: Path) -> None:
    from emulator.errors import InputError

    with pytest.raises(InputError, match="no results folder to reuse for mixed"):
        study.run_study(
            tmp_path / "s", reuse={"allreduce_only": [tmp_path], "alltoall_only": [tmp_path]}
        )
    with pytest.raises(InputError, match="--repeats 0: must be at least 1"):
        study.run_study(tmp_path / "s", repeats=0)
    assert not (tmp_path / "s").exists()  # nothing created for bad input


def test_scenario_set_reaches_the_study_and_names_shipped_files(
    calls: list[dict[str, Any]],
) -> None:
    assert run() == 0 and run("--scenario-set", "ecmp") == 0
    assert [c["scenario_set"] for c in calls] == ["main", "ecmp"]
    for name in study.SCENARIO_SETS:
        paths = study.default_scenarios(name)
        assert sorted(paths) == sorted(study.ROLES) and all(p.is_file() for p in paths.values())
    assert study.default_scenarios("ecmp")["mixed"].name == "moe_mix_ecmp.yaml"


def test_reference_sim_reaches_the_study_and_is_refused_with_simulated_runs(
    calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("--reference", "sim") == 0 and calls[-1]["reference"] == "sim"
    assert calls[-1]["runner"].keywords == {"backend": None, "reference": "sim"}
    assert run("--reference", "sim", "--backend", "sim") == 2 and len(calls) == 1
    assert "--reference sim: the runs are simulated already" in capsys.readouterr().err
