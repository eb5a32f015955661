"""`emulate bmwg` on the emulated fabric (real packets through the namespaces' Clos, its eBPF
marker and balancer): the incast and spraying procedures run end to end, their runs' verdicts
ok, their numbers what the procedures exist to show, and nothing is left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from emulator.studies.bmwg.runner import BmwgSettings, run_bmwg

pytestmark = pytest.mark.system

CLOS = """\
name: bmwg_small
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
traffic:
  - {name: x, kind: pairs, pairs: [[0, 4]], bytes_per_pair: 1000}
run:
  time_dilation: 1000
"""


def namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(prefix)]


def run(
    fabric_env: str, tmp_path: Path, name: str, *params: str, tdf: float | None = None
) -> dict[str, dict]:
    path = tmp_path / "fabric.yaml"
    path.write_text(CLOS)
    settings = BmwgSettings(
        backend="netns",
        repeats=1,
        progress=False,
        params=params,
        fabric_prefix=fabric_env,
        tdf=tdf,
    )
    result = run_bmwg(name, path, tmp_path / name, settings)
    print(result.text)
    assert not namespaces(fabric_env)
    return {row["trial"]: row for row in result.document["results"]["rows"]}


def test_pfc_incast_on_the_emulated_fabric(fabric_env: str, tmp_path: Path) -> None:
    # TDF 3000, not the fabric's 1000: a trial is judged only if its run reads ok, and on a slow
    # CI machine 1% of the ticks came 5-6 ms (wall) late at 1000, over DCQCN's 4 us timer there
    # (2026-11-28); at 3000 a tick may be 12 ms late. The numbers do not depend on the factor.
    rows = run(
        fabric_env,
        tmp_path,
        "pfc-incast",
        "n=2,4",
        "duration_us=1000",
        "message_kb=2048",
        tdf=3000,
    )
    for row in rows.values():
        assert row["judged"] == 1, row
        # N senders at line rate into one 100 Gb/s port: DCQCN shares it (76-78 and 68-77 Gb/s
        # here; the simulator marking on arrival as this fabric does reads 76 and 75:
        # docs/bmwg.md), marks show
        assert 50 < row["goodput_gbps"] <= 100 and row["ecn_marking_ratio"] > 0
        assert row["drops_ppm"] == 0 and row["retx_per_s"] == 0


def test_packet_spray_on_the_emulated_fabric(fabric_env: str, tmp_path: Path) -> None:
    # TDF 3000 as the incast's above: CI once read this run degraded at 1000 (1% of the ticks
    # 5 ms late, and the late ticks reordered by up to 244 packets, past the allowance of 64:
    # 127 resent, 2026-11-29); MMR and the out-of-order share do not depend on the factor
    rows = run(
        fabric_env,
        tmp_path,
        "packet-spray",
        "reliability=selective",
        "bytes_per_pair_kb=16384",
        tdf=3000,
    )
    ecmp, spray = rows["ecmp"], rows["spray-selective"]
    assert ecmp["judged"] == 1 and spray["judged"] == 1
    # the eBPF balancer spreads every QP's packets over both uplinks: even, reordered, no resend
    assert spray["mmr_leaf_up"] < min(1.1, ecmp["mmr_leaf_up"])
    # selective repeat absorbs the reordering: a resend is rare (none in most runs here; CI
    # once saw 39, 0.26% of the out-of-order packets, when a gap outlasted the allowance)
    assert spray["ooo_per_s"] > 0 and spray["retx_per_s"] <= 0.01 * spray["ooo_per_s"]


def test_pfc_incast_toward_a_software_switch_under_test(fabric_env: str, tmp_path: Path) -> None:
    """The same procedure through tester ports toward a switch (the software DUT: a router
    namespace with the eBPF marker and 100 Mb/s ports), in real time: 3:1 into its fourth port,
    the switch marks, DCQCN shares the port, the report names the switch as the lab must."""
    import os

    import yaml

    from tests.system.software_dut import DUT_RATE_BPS, PORTS, port_address, software_dut

    root = Path(__file__).resolve().parents[2]
    with software_dut(f"bm{os.getpid() % 100000}-") as (_, cables):
        document = yaml.safe_load((root / "scenarios" / "otg" / "dut.yaml").read_text())
        document["fabric"].update(
            interfaces=cables,
            addresses=[port_address(i) for i in range(PORTS)],
            gateways=[f"192.168.{70 + i}.1" for i in range(PORTS)],
            routes=["192.168.64.0/20"],
            allowlist=["192.168.64.0/20"],
            max_rate_gbps=DUT_RATE_BPS / 1e9,
        )
        path = tmp_path / "dut.yaml"
        path.write_text(yaml.safe_dump(document))
        settings = BmwgSettings(
            repeats=1,
            progress=False,
            # 600 ms: goodput averaged over more of DCQCN's recovery in real time (at 300 ms CI
            # once read 44 Mb/s while the machine was busy; quiet runs read more)
            params=("n=3", "duration_us=600000", "message_kb=256"),
            fabric_prefix=fabric_env,
        )
        result = run_bmwg("pfc-incast", path, tmp_path / "out", settings)
    print(result.text)
    (row,) = result.document["results"]["rows"]
    (run,) = result.document["results"]["runs"]
    print("goodput Mb/s", run["kpis"]["goodput_gbps"] * 1e3)
    # three senders into one 100 Mb/s port: it carries what DCQCN lets through, the switch marks
    assert 50 < run["kpis"]["goodput_gbps"] * 1e3 <= 100 and run["kpis"]["ecn_marking_ratio"] > 0
    if run["verdict"] == "ok":
        assert row["judged"] == 1 and row["goodput_gbps"] == run["kpis"]["goodput_gbps"]
    else:
        # in real time this machine may not keep DCQCN's 4 us timers (CI did not): the run is
        # left out of the means and the report says why, never averaged in
        assert row["judged"] == 0 and row["goodput_gbps"] is None
        assert any(a.startswith("n3 repeat 1: degraded") for a in result.document["anomalies"])
    assert result.document["device_identification"]["device"].startswith(
        "the switch under test between the tester's ports"
    )
    assert result.document["topology"]["draft_topology"].startswith("the switch under test")
