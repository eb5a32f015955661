"""Build the native extensions from source: `python -m emulator.native.build [--if-stale]`.

Every `build_<name>.py` in this folder exposes a cffi `ffibuilder` whose module is
`emulator.native._<name>`; each is compiled here and its shared object put next to this file
(the compiler's own output goes to `_build/<name>.log`). `--if-stale` skips a module whose shared
object is newer than all its sources (emulator.native.sources; what ./setup.sh runs on every
invocation: cheap when nothing changed). A module that fails to build is reported in one
line and the exit status is 1: the engine then runs its pure-Python path (emulator/native/__init__).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from emulator.native import HERE, built_path, module_names, stale

LOG_DIR = HERE / "_build"


def build(name: str) -> Path:
    """Compile emulator.native._<name> and return the shared object's path; raises on failure
    (the compiler's output is in the log)."""
    builder = importlib.import_module(f"emulator.native.build_{name}").ffibuilder
    LOG_DIR.mkdir(exist_ok=True)
    log = LOG_DIR / f"{name}.log"
    with tempfile.TemporaryDirectory(prefix=f"native-{name}-") as tmp:
        # distutils prints and gcc (a child process) writes to file descriptors 1 and 2
        with _fd_capture(log):
            made = Path(builder.compile(tmpdir=tmp, verbose=True))
        target = built_path(name, made.name)
        for old in HERE.glob(f"_{name}.*.so"):
            old.unlink()
        shutil.move(str(made), target)
    return target


@contextlib.contextmanager
def _fd_capture(log: Path) -> Iterator[None]:
    """Redirect file descriptors 1 and 2 into `log` (gcc is a child process writing there)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _first_error(name: str, e: BaseException) -> str:
    """The line of the compiler's log that says what went wrong (else the exception)."""
    log = LOG_DIR / f"{name}.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    for line in lines:
        if "error" in line.lower() or "not found" in line.lower():
            return line.strip()
    return f"{type(e).__name__}: {e}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--if-stale", action="store_true", help="only modules older than their sources"
    )
    args = parser.parse_args(argv)
    failed = 0
    for name in module_names():
        if args.if_stale and not stale(name):
            continue
        try:
            path = build(name)
        except Exception as e:  # a missing compiler or header, or a compile error
            failed += 1
            print(
                f"native: building emulator.native._{name} failed ({_first_error(name, e)}; "
                f"full output in {LOG_DIR / (name + '.log')}): the engine will use its "
                "pure-Python path",
                file=sys.stderr,
            )
            continue
        print(f"native: built {path.relative_to(HERE.parents[1])}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
