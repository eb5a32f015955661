"""A study's runs as Ray tasks over a cluster (`emulate study ... --cluster ADDRESS`,
emulator/studies/ray_pool.py), on a local Ray cluster of two one-core nodes with Ray's token
authentication on (ray.cluster_utils.Cluster): the runs spread over both nodes, come back into the
study folder, and the study reads what the same study reads run here, number for number (a
simulation is deterministic for a seed). The driver runs as `emulate` would, in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emulator.backends.cluster.local import local_ray
from emulator.studies.ray_pool import TASK_JSON
from tests.integration.test_sensitivity_sim import SCENARIO

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
RATES = "400,200,100"


def _emulate(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if token is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    return subprocess.run(
        [sys.executable, "-m", "emulator.cli", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=600, check=False,
    )  # fmt: skip


def _without_folders(document: Any) -> Any:
    """The study's document without paths (the two studies' folders differ)."""
    if isinstance(document, dict):
        return {
            k: _without_folders(v)
            for k, v in document.items()
            if k not in ("folder", "plots", "report", "out_dir")
        }
    if isinstance(document, list):
        return [_without_folders(v) for v in document]
    if isinstance(document, str) and document.startswith("/"):
        return "<path>"
    return document


def test_a_sensitivity_study_over_two_nodes_reads_what_it_reads_here(
    system: None, tmp_path: Path
) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO)
    here = _emulate("study", "sensitivity", str(scenario), "--link-gbps", RATES,
                    "--backend", "sim", "--out", str(tmp_path / "here"), "--no-progress")  # fmt: skip
    assert here.returncode == 0, here.stderr
    with local_ray([{}, {}]) as address:
        token = os.environ["RAY_AUTH_TOKEN"]
        spread = _emulate("study", "sensitivity", str(scenario), "--link-gbps", RATES,
                          "--backend", "sim", "--cluster", address,
                          "--out", str(tmp_path / "cluster"), "--no-progress", token=token)  # fmt: skip
    assert spread.returncode == 0, spread.stderr
    print(spread.stderr)
    study = tmp_path / "cluster"
    runs = sorted(p for p in (study / "runs").iterdir() if (p / "summary.json").is_file())
    assert len(runs) == 3
    tasks = [json.loads((run / TASK_JSON).read_text()) for run in runs]
    # two one-core nodes and a head with none: the first two runs start on different nodes
    assert len({t["node_id"] for t in tasks}) == 2
    assert all(t["pid"] != os.getpid() for t in tasks)
    assert not list((study / "runs").glob(".*"))  # nothing half-received
    ours = json.loads((tmp_path / "here" / "sensitivity.json").read_text())
    theirs = json.loads((study / "sensitivity.json").read_text())
    assert _without_folders(theirs) == _without_folders(ours)
    assert (study / "report.html").is_file()


def test_emulated_runs_over_a_cluster_are_refused_before_anything_runs(
    system: None, tmp_path: Path
) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO.replace("run: {backend: sim}", "run: {backend: netns}"))
    with local_ray([{}]) as address:
        proc = _emulate("study", "sensitivity", str(scenario), "--link-gbps", "400,200",
                        "--cluster", address, "--out", str(tmp_path / "s"),
                        token=os.environ["RAY_AUTH_TOKEN"])  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith(f"emulate study: error: {scenario}: --cluster: its runs take the netns ")
    assert not (tmp_path / "s").exists()


def test_a_cluster_that_lets_anyone_in_is_refused(system: None, tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO)
    with local_ray([{}], token_auth=False) as address:
        proc = _emulate("study", "sensitivity", str(scenario), "--link-gbps", "400,200",
                        "--backend", "sim", "--cluster", address, "--out", str(tmp_path / "s"),
                        token="a-token-the-cluster-does-not-ask-for")  # fmt: skip
    assert proc.returncode != 0
    (line,) = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith(
        f"emulate study: error: --cluster: the Ray cluster at {address} does not require"
    )
    assert not (tmp_path / "s" / "sensitivity.json").exists()
