"""BPF programs in C, compiled with clang at first use and cached by source hash.

The eBPF ECN marker (fabrics/ecn/phantom_marker.c) and the AF_XDP port's XDP program
(xsk_rocev2.bpf.c) are built here: clang -O2 -g -target bpf, into the user's cache
(`$XDG_CACHE_HOME/chakra-emulator/bpf`), one object per source digest and variant, written under a
temporary name and renamed so concurrent runs never load half a file.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from emulator.errors import EnvironmentProblem

COMPILE_TIMEOUT_S = 120


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "chakra-emulator" / "bpf"


def _multiarch_include() -> list[str]:
    # Debian keeps asm/types.h under the multiarch triplet; -target bpf does not add it.
    triplet = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}.get(platform.machine())
    path = Path("/usr/include") / triplet if triplet else None
    return [f"-I{path}"] if path and path.is_dir() else []


def compiled(source: Path, stem: str, *, what: str, defines: Sequence[str] = ()) -> Path:
    """`source` compiled (with `-D` for each of `defines`) to `<cache>/<stem>-<digest>.o`.

    `what` names the program in the errors: clang missing, or the compiler's first line."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    target = cache_dir() / f"{stem}-{digest}.o"
    if target.exists():
        return target
    clang = shutil.which("clang")
    if clang is None:
        raise EnvironmentProblem(f"{what} needs clang (Debian package clang)")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    argv = [clang, "-O2", "-g", "-target", "bpf", *_multiarch_include()]
    argv += [f"-D{name}" for name in defines]
    argv += ["-c", str(source), "-o", str(tmp)]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=COMPILE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        raise EnvironmentProblem(
            f"compiling {source.name} ({what}) took over {COMPILE_TIMEOUT_S} s"
        ) from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        first = (proc.stderr.strip().splitlines() or ["?"])[0]
        raise EnvironmentProblem(f"compiling {source.name} ({what}) failed: {first}")
    tmp.replace(target)
    return target
