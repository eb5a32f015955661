"""`emulate fabric up` holds a fabric until SIGTERM/Ctrl-C, then releases it; missing netem refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fabrics.ecn.markers import NETEM_PROBE, qdisc_kind_available
from fabrics.iproute import ip, run_batch
from fabrics.ownership import state_path

pytestmark = pytest.mark.system
REPO = Path(__file__).resolve().parents[2]

SCENARIO = """
name: fabric-cli
workload:
  generate: {{kind: allreduce}}
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 2
  spines: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
  link_delay_us: {delay}
run:
  time_dilation: 100
"""


def emulate(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "emulator.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
    )


def test_fabric_up_holds_until_sigterm_then_releases(fabric_env: str, tmp_path: Path) -> None:
    scenario = tmp_path / "fabric.yaml"
    scenario.write_text(SCENARIO.format(delay=0))
    proc = emulate(
        "fabric", "up", str(scenario), "--no-cli", "--json", "--netns-prefix", fabric_env
    )
    ranks: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:  # it exited before printing its layout: show why
            assert proc.stderr is not None
            proc.wait(timeout=30)
            why = proc.stderr.read()
            pytest.fail(f"emulate fabric up printed no layout (exit {proc.returncode}): {why}")
        layout = json.loads(line)
        assert layout["marker"] == "ebpf" and layout["rate_scale"] == pytest.approx(0.01)
        ranks = layout["ranks"]
        assert [r["host"] for r in ranks] == ["h0", "h1", "h2", "h3"]
        assert all(str(r["netns"]).startswith(fabric_env) for r in ranks)
        ping = subprocess.run(
            ["ip", "netns", "exec", ranks[0]["netns"], "ping", "-c1", "-W2", ranks[3]["address"]],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert state_path().exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "torn down" in err
    assert not state_path().exists()
    assert not {r["netns"] for r in ranks} & set(os.listdir("/run/netns"))


def test_link_delay_without_netem_is_refused_with_a_reason(fabric_env: str, tmp_path: Path) -> None:
    scenario = tmp_path / "delay.yaml"
    scenario.write_text(SCENARIO.format(delay=5))
    probe = f"{fabric_env}netem"
    run_batch([ip("netns", "add", probe)])
    try:
        has_netem = qdisc_kind_available(NETEM_PROBE, probe)
    finally:
        run_batch([ip("netns", "del", probe)])
    if has_netem:
        pytest.skip("this kernel has netem; the refusal path cannot be exercised here")
    proc = emulate("fabric", "up", str(scenario), "--no-cli", "--netns-prefix", fabric_env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "link_delay_us" in err and "netem" in err
    assert len(err.strip().splitlines()) <= 3  # a message, not a traceback
    assert not state_path().exists()
