"""The `emulate` command line: a registry of subcommands, each a module in emulator.commands.

A subcommand module provides HELP (one line), `add_arguments(parser)` and `main(args) -> int`.
Modules import their heavy dependencies inside `main`, so `emulate --help` stays fast; the ones a
module names in IMPORTS (its C extensions and the project's modules its work needs) are imported
before `main` runs, with Ctrl-C and SIGTERM held until they are in (`_import_first`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

from emulator import __version__
from emulator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EmulatorError
from emulator.signals import forked_helper_died, signals_deferred

# Name -> module, in the order `emulate --help` lists them.
COMMANDS: dict[str, str] = {
    "run": "emulator.commands.run",
    "validate": "emulator.commands.validate",
    "plan": "emulator.commands.plan",
    "generate": "emulator.commands.generate",
    "report": "emulator.commands.report",
    "compare": "emulator.commands.compare",
    "study": "emulator.commands.study",
    "fabric": "emulator.commands.fabric",
    "clean": "emulator.commands.clean",
    "otg": "emulator.commands.otg",
    "bmwg": "emulator.commands.bmwg",
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emulate",
        description="Replay Chakra execution traces as RoCEv2 traffic with DCQCN over an "
        "emulated Clos fabric or real NIC ports toward a switch under test.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in COMMANDS:
        module = _load(name)
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(cmd)
        cmd.set_defaults(_main=module.main)
    return parser


@contextlib.contextmanager
def _terminate_like_ctrl_c() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C from the first line on: a run's handlers cover only its
    replay, and a SIGTERM before them (generating the trace) or after (results written,
    fabric gone) would otherwise end the process where it stands and leave the generated
    trace's temporary folder behind."""
    owner = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        del frame
        if not forked_helper_died(signum, owner):
            raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (a test calling main from a thread)
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    with _terminate_like_ctrl_c():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        # Building the parser imports every command; a Ctrl-C that early is an interrupt too.
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        print("emulate: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        _import_first(_load(args.command))
        code: int = args._main(args)
        return code
    except EmulatorError as exc:
        print(f"emulate {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return _interrupted(args.command)
    except BrokenPipeError:
        # Output piped into `head` and closed early: not an error worth a traceback.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        return 0
    except Exception as exc:
        # Python wraps an exception raised in some hooks: a Ctrl-C during an import that
        # defines a dataclass surfaces as "RuntimeError: Error calling __set_name__", caused
        # by the KeyboardInterrupt. Still an interrupt, not a crash.
        if _caused_by_interrupt(exc):
            return _interrupted(args.command)
        raise


def _interrupted(command: str) -> int:
    print(f"emulate {command}: interrupted", file=sys.stderr)
    # A Ctrl-C can land inside a library's constructor (pyroute2 builds asyncio loops);
    # the half-built object then complains when collected. Say it in one line, not a trace.
    sys.unraisablehook = _one_line_unraisable(command)
    return EXIT_INTERRUPTED


def _caused_by_interrupt(exc: BaseException) -> bool:
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


def _import_first(module: ModuleType) -> None:
    """Import the modules a command names (IMPORTS) with Ctrl-C and SIGTERM held until they
    are in, then raised. Interrupted inside an extension's initialization (matplotlib's
    ft2font, a pybind11 module), an import leaves the extension half made: "ImportError:
    initialization failed", and the interpreter aborted at exit (SIGABRT, "PyThreadState_Get:
    the function must be called with the GIL held") instead of exiting as interrupted; inside
    a dataclass's definition it surfaces as a RuntimeError."""
    names = getattr(module, "IMPORTS", ())
    if not names:
        return
    with signals_deferred():
        for name in names:
            importlib.import_module(name)


def _one_line_unraisable(command: str) -> Callable[[Any], None]:
    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        print(
            f"emulate {command}: after the interrupt, ignored {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )

    return hook


if __name__ == "__main__":
    sys.exit(main())
