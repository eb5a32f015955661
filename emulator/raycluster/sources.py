"""Which code a process runs: a hash of the project's Python sources.

A cluster's driver and every node must run the same code (the cluster backend's engine actors,
a study's runs as Ray tasks): each node hashes its own sources and the driver compares.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # emulator/raycluster/ -> the checkout
PACKAGES = ("emulator", "fabrics", "collectors")


def source_fingerprint(root: Path = PROJECT_ROOT) -> str:
    """A hash of every .py file of PACKAGES under `root` (its path and bytes), 16 hex digits.
    Refuses a root holding none of them: a hash of nothing would match any other."""
    digest = hashlib.sha256()
    files = 0
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
            files += 1
    if files == 0:
        raise RuntimeError(f"{root}: no sources of {', '.join(PACKAGES)} to fingerprint")
    return digest.hexdigest()[:16]
