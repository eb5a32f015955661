"""A run's temporary folders (its generated trace set, a probe's results) in the state file: the
owner removes them itself (tempfile), its ledger's release leaves them alone, and only after a
kill does `emulate clean` remove them, by the path the state file names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fabrics.ownership import Ledger, clean_state, owned_folder


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    return tmp_path / "state.json"


def test_a_ledger_lists_the_folders_held_while_it_is_claimed(state: Path) -> None:
    with owned_folder("emulate-run-") as folder:
        ledger = Ledger.claim("test", state)
        doc = json.loads(state.read_text())
        assert doc["resources"] == [{"kind": "folder", "path": folder}]
        # the owner's teardown: the list empties, the folder stays (still in use)
        assert ledger.release() == []
        assert not state.exists() and os.path.isdir(folder)
    assert not os.path.exists(folder)  # and the owner removes it on exit


def test_emulate_clean_removes_a_killed_runs_folder_and_only_that(state: Path) -> None:
    other = Path(state.parent / "tmp" / "emulate-run-not-ours")
    other.mkdir()
    with owned_folder("emulate-run-") as folder:
        (Path(folder) / "moe_mix.0.et").write_bytes(b"x")
        Ledger.claim("test", state)
        # a kill: the owner never releases; the state file names the folder
        removed, pid = clean_state(state)  # (this process may clean its own state file)
        assert removed == [f"folder {folder}"] and pid == os.getpid()
        assert not os.path.exists(folder) and not state.exists()
    assert other.is_dir()  # a folder of the same prefix the state file does not name


def test_no_folder_no_record(state: Path) -> None:
    ledger = Ledger.claim("test", state)
    assert json.loads(state.read_text())["resources"] == []
    ledger.release()
