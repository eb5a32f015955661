"""The results folder of a run, written atomically with private permissions.

Layout: summary.json, flows.parquet, collectives.parquet, nic.parquet, ports.parquet (with each
port's `tier_group`, collectors.balance), cpu.parquet, queue_pairs.parquet (the tester's per-QP
counters),
scenario.yaml (a copy of the scenario as run) and plots/*.png (collectors.plots).

Atomicity: everything is written into a hidden temporary folder beside the target
(`.<name>.<random>.tmp`) and renamed onto the target at the end, so the target is always either
absent or complete. A run may call write() again with partial=True at checkpoints and on
interruption: the previous folder is swapped out and removed after the new one is in place, so
the folder a crash leaves behind is the last complete write, marked `"partial": true` when it was
a checkpoint. Files are created 0600 and folders 0700: results can reveal a lab's topology and
addresses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.balance import with_tier_groups
from collectors.plots import render_run_plots
from collectors.reordering import MultipathSetup
from collectors.summary import RunMeta, build_summary
from collectors.tables import RunTables, write_parquet
from emulator.errors import InputError

SUMMARY = "summary.json"
SCENARIO_COPY = "scenario.yaml"
PLOTS = "plots"
FILE_MODE = 0o600
DIR_MODE = 0o700


def default_results_dir(parent: Path, scenario: str, started: datetime) -> Path:
    """results/<scenario>-<UTC timestamp>/, e.g. results/moe_mix-20261122T061500Z; with -2, -3...
    appended when a run of the same scenario started in the same second already has it."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in scenario) or "run"
    base = parent / f"{safe}-{started:%Y%m%dT%H%M%SZ}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def read_json_object(path: Path) -> dict[str, Any]:
    """A results file that must hold one JSON object (summary.json, study.json, seeds.json)."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read as JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise InputError(f"{path}: expected a JSON object")
    return loaded


def write_private(path: Path, data: bytes) -> None:
    """Write a file created with mode 0600 (umask can only remove bits)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, obj: Mapping[str, Any]) -> None:
    write_private(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def replace_file_atomically(path: Path, data: bytes) -> None:
    """Write beside `path`, then rename over it: readers see the old or the new file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write_private(Path(tmp), data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def make_private(folder: Path) -> None:
    """Files 0600, folders 0700, below and including `folder`."""
    os.chmod(folder, DIR_MODE)
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), DIR_MODE)
        for f in files:
            os.chmod(os.path.join(root, f), FILE_MODE)


def sync_tree(folder: Path) -> None:
    """fsync every file and folder below `folder`, so a rename after it never exposes files
    whose data is still only in the page cache (a power cut would leave them empty)."""
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def is_results_folder(path: Path) -> bool:
    return (path / SUMMARY).is_file()


class ResultsWriter:
    """Writes (and re-writes, at checkpoints) one run's results folder `target`."""

    def __init__(
        self,
        target: Path,
        scenario_text: str | None = None,
        render_plots: bool = True,
        replace_existing: bool = False,
    ) -> None:
        """replace_existing: an existing results folder at `target` (another run's) may be
        replaced; without it only an absent or empty folder is accepted. The writer's own
        earlier writes (checkpoints) are always replaced."""
        self.target = target
        self.scenario_text = scenario_text
        self.render_plots = render_plots
        # the summary's `reordering` names the scenario's multipath setup (read once)
        self.multipath = MultipathSetup.of_scenario_text(scenario_text)
        if target.exists():
            empty = target.is_dir() and not any(target.iterdir())
            if not empty and not (replace_existing and is_results_folder(target)):
                what = "a results folder" if is_results_folder(target) else "not an empty folder"
                raise InputError(
                    f"{target}: exists and is {what}; choose another --out"
                    + (" or allow replacing it" if is_results_folder(target) else "")
                )

    def write(
        self,
        meta: RunMeta,
        tables: RunTables,
        partial: bool,
        files: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Write the folder (with `files`: relative path -> bytes, as packet captures); return
        the summary written."""
        if meta.multipath is None and self.multipath is not None:
            meta = dataclasses.replace(meta, multipath=self.multipath)
        parent = self.target.parent
        parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.", suffix=".tmp", dir=parent))
        try:
            for name, data in (files or {}).items():
                (tmp / name).parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
                write_private(tmp / name, data)
            summary = self._fill(tmp, meta, tables, partial)
            make_private(tmp)
            sync_tree(tmp)
            self._swap_in(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return summary

    def _fill(
        self, folder: Path, meta: RunMeta, tables: RunTables, partial: bool
    ) -> dict[str, Any]:
        for name, table in tables.by_name().items():
            # ports: labelled by tier group here, where the file is written (the samplers
            # know ports by name only; the label follows from the name)
            labelled = with_tier_groups(table) if name == "ports" else table
            write_parquet(labelled, folder / f"{name}.parquet")
        if self.scenario_text is not None:
            write_private(folder / SCENARIO_COPY, self.scenario_text.encode())
        if self.render_plots:
            render_run_plots(tables, folder / PLOTS, meta.scenario)
        summary = build_summary(meta, tables, partial)
        # The summary last: its presence marks a folder whose other files are all written.
        write_json(folder / SUMMARY, summary)
        return summary

    def _swap_in(self, tmp: Path) -> None:
        old: Path | None = None
        if self.target.exists():
            old = Path(
                tempfile.mkdtemp(
                    prefix=f".{self.target.name}.", suffix=".old", dir=self.target.parent
                )
            )
            os.rename(self.target, old / "previous")
        os.rename(tmp, self.target)
        if old is not None:
            shutil.rmtree(old)
