"""The `emulate` command line: every subcommand listed on one line, each with its own --help."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run"], "give either a SCENARIO file or --trace PREFIX"),
        (["run", "a.yaml", "--trace", "x"], "give either a SCENARIO file or --trace PREFIX"),
        (["run", "a.yaml", "--fabric", "clos:leaves=2"], "--fabric and --comm-groups go with"),
        (["run", "a.yaml", "--tdf", "0.5"], "--tdf 0.5: must be at least 1"),
        (["run", "/nonexistent/s.yaml"], "/nonexistent/s.yaml: no such file"),
    ],
)
def test_run_bad_input_is_one_line_before_anything_is_built(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_after_an_interrupt_a_half_built_object_complains_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc
    import sys

    import emulator.commands.validate as validate

    class HalfBuilt:
        def __del__(self) -> None:
            raise AttributeError("'Loop' object has no attribute '_signal_handlers'")

    def interrupted(args: object) -> int:
        del args
        # what a Ctrl-C inside a library constructor leaves behind, alive until the handler ends
        raise KeyboardInterrupt(HalfBuilt())

    monkeypatch.setattr(validate, "main", interrupted)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # restored afterwards
    assert main(["validate", "x"]) == 130
    gc.collect()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "emulate validate: interrupted",
        "emulate validate: after the interrupt, ignored AttributeError: "
        "'Loop' object has no attribute '_signal_handlers'",
    ]


def test_an_interrupt_while_the_commands_load_is_an_interrupt(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import emulator.cli as cli

    def slow_import(name: str) -> object:
        raise KeyboardInterrupt  # Ctrl-C while a command module (matplotlib...) is imported

    monkeypatch.setattr(cli, "_load", slow_import)
    assert main(["validate", "x"]) == 130
    assert capsys.readouterr().err == "emulate: interrupted\n"


def test_a_ctrl_c_while_a_commands_extensions_load_waits_until_they_are_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C inside a C extension's initialization left it half made and the interpreter
    aborting at exit (matplotlib's ft2font: SIGABRT instead of 130). A command's IMPORTS are
    imported with the signal held: the module that was loading when it came is whole, then
    the command is interrupted (130) without running."""
    import sys
    import types

    import emulator.cli as cli

    (tmp_path / "slow_extension.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nLOADED = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ran: list[object] = []
    command = types.ModuleType("fake_command")
    command.IMPORTS = ("slow_extension",)  # type: ignore[attr-defined]
    command.HELP = "fake"  # type: ignore[attr-defined]
    command.add_arguments = lambda parser: None  # type: ignore[attr-defined]

    def command_main(args: object) -> int:
        ran.append(args)
        return 0

    command.main = command_main  # type: ignore[attr-defined]
    monkeypatch.setitem(cli.COMMANDS, "fake", "fake_command")
    monkeypatch.setitem(sys.modules, "fake_command", command)
    monkeypatch.delitem(sys.modules, "slow_extension", raising=False)
    assert main(["fake"]) == 130
    assert sys.modules["slow_extension"].LOADED is True and ran == []
    assert capsys.readouterr().err == "emulate fake: interrupted\n"


def test_a_ctrl_c_wrapped_by_python_is_still_an_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CI caught a Ctrl-C landing while a module defined a dataclass: Python reported it as
    "RuntimeError: Error calling __set_name__ ..." caused by the KeyboardInterrupt, and the
    run exited 1 with a traceback. An exception caused by an interrupt is an interrupt (130);
    any other exception still propagates."""
    import sys
    import types

    import emulator.cli as cli

    def wrapped(args: object) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    def plain(args: object) -> int:
        raise RuntimeError("a real bug")

    for name, body in (("wrapped", wrapped), ("plain", plain)):
        command = types.ModuleType(f"fake_{name}")
        command.HELP = name  # type: ignore[attr-defined]
        command.add_arguments = lambda parser: None  # type: ignore[attr-defined]
        command.main = body  # type: ignore[attr-defined]
        monkeypatch.setitem(cli.COMMANDS, name, f"fake_{name}")
        monkeypatch.setitem(sys.modules, f"fake_{name}", command)
    assert main(["wrapped"]) == 130
    assert capsys.readouterr().err == "emulate wrapped: interrupted\n"
    with pytest.raises(RuntimeError, match="a real bug"):
        main(["plain"])


def test_every_command_imports_first_what_exists() -> None:
    """A command's IMPORTS are real module names (a typo would fail every run at its start)."""
    import importlib

    import emulator.cli as cli

    for name in cli.COMMANDS:
        for module in getattr(cli._load(name), "IMPORTS", ()):
            importlib.import_module(module)
