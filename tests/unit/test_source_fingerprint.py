"""The code fingerprint a cluster's driver and nodes compare (emulator.backends.cluster.sources)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from emulator.raycluster.sources import PROJECT_ROOT, source_fingerprint


def _tree(root: Path, text: str) -> Path:
    for package in ("emulator", "fabrics", "collectors"):
        (root / package / "sub").mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / "sub" / "mod.py").write_text(text)
    return root


def test_the_checkouts_sources_are_hashed_not_nothing() -> None:
    # it once hashed a folder with no sources in it: every checkout had the same fingerprint
    assert (PROJECT_ROOT / "emulator" / "cli.py").is_file()
    assert source_fingerprint() != hashlib.sha256().hexdigest()[:16]


def test_one_changed_byte_changes_the_fingerprint(tmp_path: Path) -> None:
    a = source_fingerprint(_tree(tmp_path / "a", "X = 1\n"))
    b = source_fingerprint(_tree(tmp_path / "b", "X = 2\n"))
    same = source_fingerprint(_tree(tmp_path / "c", "X = 1\n"))
    assert a != b
    assert a == same  # the checkout's own path is not part of it


def test_a_moved_file_changes_the_fingerprint(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", "X = 1\n")
    before = source_fingerprint(a)
    (a / "fabrics" / "sub" / "mod.py").rename(a / "fabrics" / "sub" / "other.py")
    assert source_fingerprint(a) != before


def test_a_root_without_sources_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no sources"):
        source_fingerprint(tmp_path)
