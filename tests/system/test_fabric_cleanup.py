"""Nothing the tool creates outlives it: after teardown, and after `emulate clean` following a
SIGKILLed bring-up, namespaces, interfaces, qdiscs and BPF programs are as before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fabrics.netns import bring_up
from fabrics.ownership import FabricActive, load_state, release_resources, state_path
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos

pytestmark = pytest.mark.system

SPEC = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, host_link_gbps=1, fabric_link_gbps=1)


def snapshot() -> dict[str, set[str]]:
    def lines(*argv: str) -> set[str]:
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return {line.split("\\")[0].split(" (id")[0] for line in out.splitlines() if line.strip()}

    progs = json.loads(
        subprocess.run(
            ["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True
        ).stdout
        or "[]"
    )
    return {
        "netns": lines("ip", "netns", "list"),
        "links": {line.split(":")[1].strip() for line in lines("ip", "-o", "link", "show")},
        "qdiscs": lines("tc", "qdisc", "show"),
        "bpf": {f"{p['id']}:{p.get('tag')}" for p in progs if p.get("name") == "phantom_marker"},
    }


def created_since(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, set[str]]:
    return {k: after[k] - before[k] for k in before if after[k] - before[k]}


def test_teardown_leaves_nothing_and_second_bring_up_refuses(fabric_env: str) -> None:
    before = snapshot()
    topo = build_clos(SPEC)
    live = bring_up(topo, rate_scale=0.1, prefix=fabric_env)
    try:
        during = snapshot()
        assert {f"{fabric_env}{n.name}" for n in topo.nodes} <= during["netns"]
        assert len(created_since(before, during)["bpf"]) == 12  # one program per switch port
        with pytest.raises(FabricActive, match="active"):
            bring_up(topo, prefix=fabric_env + "x")
    finally:
        removed = live.close()
    assert sum(r.startswith("namespace ") for r in removed) == len(topo.nodes)
    assert not state_path().exists()
    assert created_since(before, snapshot()) == {}


CHILD = textwrap.dedent(
    """
    import sys, time
    from fabrics.netns import bring_up
    from fabrics.spec import ClosSpec
    from fabrics.topology import build_clos
    spec = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, host_link_gbps=1, fabric_link_gbps=1)
    live = bring_up(build_clos(spec), rate_scale=0.1, prefix=sys.argv[1])
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_clean_after_sigkill_removes_everything_from_the_state_file(fabric_env: str) -> None:
    before = snapshot()
    env = dict(os.environ)
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, fabric_env],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=repo,
    )
    try:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        _check_clean_after_kill(before, env, repo, child.pid)
    finally:
        # Whatever failed above, the test does not leave the killed run's fabric behind.
        state = load_state()
        if state is not None:
            release_resources(state["resources"])
            state_path().unlink()


def _check_clean_after_kill(
    before: dict[str, set[str]], env: dict[str, str], repo: Path, pid: int
) -> None:
    state = load_state()
    assert state is not None and state["pid"] == pid
    leftover = created_since(before, snapshot())
    nodes = len(build_clos(SPEC).nodes)
    assert len(leftover["netns"]) == nodes and len(leftover["bpf"]) == 12  # nothing was released

    clean = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "clean", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=60,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr
    removed = json.loads(clean.stdout)["removed"]
    assert sorted(r for r in removed if r.startswith("namespace ")) == sorted(
        f"namespace {ns}" for ns in leftover["netns"]
    )
    assert sum(r.startswith("BPF program ") for r in removed) == 12
    assert not state_path().exists()
    deadline = time.monotonic() + 5
    while created_since(before, snapshot()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert created_since(before, snapshot()) == {}
    again = subprocess.run(
        [sys.executable, "-m", "emulator.cli", "clean"],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0 and "nothing to clean" in again.stdout


def test_a_failure_mid_bring_up_releases_what_was_made(
    fabric_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabrics.ecn import ebpf

    def fail(maps: object, params: object) -> None:
        raise RuntimeError("injected failure after the queues and programs are attached")

    monkeypatch.setattr(ebpf, "write_params", fail)
    before = snapshot()
    with pytest.raises(RuntimeError, match="injected"):
        bring_up(build_clos(SPEC), marker="ebpf", prefix=fabric_env)
    assert not state_path().exists()
    assert created_since(before, snapshot()) == {}
