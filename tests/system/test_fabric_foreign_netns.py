"""A fabric never takes over (and so never deletes) a namespace it did not create."""

from __future__ import annotations

import subprocess

import pytest

from emulator.errors import EnvironmentProblem
from fabrics.registry import bring_up_fabric
from fabrics.spec import ClosSpec

pytestmark = pytest.mark.system


def test_existing_namespace_with_a_fabric_name_is_refused_and_kept(fabric_env: str) -> None:
    foreign = f"{fabric_env}h1"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        spec = ClosSpec(hosts_per_leaf=1, leaves=2, spines=1, marker="none")
        with pytest.raises(EnvironmentProblem, match=f"{foreign} already exists"):
            bring_up_fabric(spec, prefix=fabric_env)
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert foreign in names.split()
        assert not [n for n in names.split() if n.startswith(fabric_env) and n != foreign]
    finally:
        subprocess.run(["ip", "netns", "del", foreign], check=False)
