"""Native (C) parts of the engine's data path, of the planner and of the packet simulator, built
from source with cffi, and how they load.

Each module has its own builder, `build_<name>.py` exposing a cffi `ffibuilder` for
`emulator.native._<name>`, and C files named `<name>*.c` / `<name>*.h`; `python -m
emulator.native.build` compiles them all into this folder (./setup.sh runs it whenever one of a
module's sources is newer than what it built: `sources`). Nothing here is
required: a module that is missing, stale or fails the engine's self-check leaves the engine on
its pure-Python path, and the run's metadata says which path ran and why (`load` gives the why).

- `_burst` (burst.c): the engine's data path over UDP sockets: a burst's segments laid out with
  their ICRCs and sent, several GSO buffers in one sendmmsg (glue: burst.py), a socket read with
  its control messages and a GRO read parsed as one run (reads.py), the ACKs a read produces
  (acks.py); selfcheck.py is what a worker checks before it trusts the module.
- `_fill` (fill.c): the congestion-free plan's max-min progressive filling
  (emulator/schedule/fluid.py runs the same levels in numpy when it is not built; glue: fill.py).
- `_simfab` (simfab.c): the packet simulator's fabric, its event heap, ports, ECMP switches and
  PFC accounts (emulator/sim/native.py is its Python side; without it emulator/sim/fabric.py
  builds the Python fabric, whose results it gives bit for bit).
"""

from __future__ import annotations

import importlib
import importlib.machinery
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def sources(name: str) -> list[Path]:
    """What emulator.native._<name> is built from, by the folder's convention: its builder
    build_<name>.py, the shared build.py, and the C files and headers whose names start with
    <name> (burst.c; xsk.c, xsk_rocev2.bpf.c)."""
    found = [HERE / f"build_{name}.py", HERE / "build.py"]
    for pattern in (f"{name}*.c", f"{name}*.h"):
        found += sorted(HERE.glob(pattern))
    return [p for p in found if p.exists()]


def module_names() -> list[str]:
    """The native modules this checkout defines (one per build_<name>.py)."""
    return sorted(p.stem.removeprefix("build_") for p in HERE.glob("build_*.py"))


def built_path(name: str, built_file: str | None = None) -> Path:
    """Where the shared object of emulator.native._<name> lives (or goes)."""
    if built_file is None:
        built_file = f"_{name}{importlib.machinery.EXTENSION_SUFFIXES[0]}"
    return HERE / built_file


def stale(name: str) -> bool:
    """The module is not built, or one of its sources is newer than it."""
    built = built_path(name)
    if not built.exists():
        return True
    newest = max((p.stat().st_mtime for p in sources(name)), default=0.0)
    return newest > built.stat().st_mtime


def load(name: str) -> tuple[ModuleType | None, str]:
    """The compiled module emulator.native._<name> and "" when it loads, else None and one line
    saying why (the engine then uses its Python path)."""
    if not built_path(name).exists():
        return None, (
            f"emulator.native._{name} is not built (./setup.sh builds it; or "
            "`python -m emulator.native.build`)"
        )
    if stale(name):
        return None, (
            f"emulator.native._{name} is older than its sources (rebuild: ./setup.sh or "
            "`python -m emulator.native.build`)"
        )
    try:
        return importlib.import_module(f"emulator.native._{name}"), ""
    except ImportError as e:
        return None, f"emulator.native._{name} does not load: {e}"
