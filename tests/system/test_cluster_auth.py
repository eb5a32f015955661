"""The cluster itself must refuse a caller without Ray's token (emulator/backends/cluster/connect.py):
a local cluster started without token authentication is refused, in one line naming the part
that let a token-less call in, however the driver is set up; one started with it is accepted.
The driver runs as `emulate` would, in its own process, with a token in its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.backends.cluster.local import local_cluster

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
DRIVER = (
    "import sys\n"
    "from emulator.raycluster.join import connect\n"
    "from emulator.errors import EnvironmentProblem\n"
    "try:\n"
    "    connect(sys.argv[1])\n"
    "except EnvironmentProblem as exc:\n"
    "    print(exc)\n"
    "    sys.exit(2)\n"
    "print('accepted')\n"
)


def _driver(address: str, token: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-c", DRIVER, address],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


def test_a_cluster_without_token_auth_is_refused_naming_its_head(
    system: None, tmp_path: Path
) -> None:
    with local_cluster(tmp_path, token_auth=False) as lab:
        proc = _driver(lab.address, "a-token-the-cluster-does-not-ask-for")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    assert line.startswith(f"run.cluster.address: the Ray cluster at {lab.address} does not ")
    assert f"the head's GCS at {lab.address}: it answered a call that carried no token" in line
    assert "RAY_AUTH_MODE=token" in line


def test_a_cluster_with_token_auth_is_accepted(system: None, tmp_path: Path) -> None:
    with local_cluster(tmp_path) as lab:
        proc = _driver(lab.address, os.environ["RAY_AUTH_TOKEN"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "accepted"
