"""The `emulate` command line: every subcommand listed on one line, each with its own --help."""

from __future__ import annotations

import pytest

from emulator.cli import COMMANDS, main


def test_help_lists_every_subcommand_on_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line for line in lines if line.startswith("    ") and line.split()}
    assert set(COMMANDS) <= set(listed)
    for name in COMMANDS:
        # one line each: the line after a command's entry is the next command, not a wrapped tail
        index = lines.index(listed[name])
        following = lines[index + 1] if index + 1 < len(lines) else ""
        assert following == "" or following.split()[0] in COMMANDS, following


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_subcommand_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    assert f"usage: emulate {name}" in capsys.readouterr().out


def test_no_command_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "commands:" in capsys.readouterr().out


def test_run_not_yet_implemented_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "scenarios/moe_mix.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not yet implemented" in err and "Traceback" not in err
