"""The link-event impairment on a live fabric: a spine cable goes down and traffic goes around it;
a replay with a cable down and up mid-run completes every flow and records what crossed it; with
a host cut off and no way around, the run ends at its deadline naming the flows that could not
complete, instead of hanging."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.engine.coordinator import EngineFailure
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from fabrics.netns import bring_up
from fabrics.spec import ClosSpec
from fabrics.topology import build_clos, cable_named
from tests.system.conftest import ping_all_pairs
from tests.system.test_run_end_to_end import MINI

pytestmark = pytest.mark.system


def _route(netns: str, prefix: str) -> str:
    return subprocess.run(
        ["ip", "-n", netns, "route", "show", prefix], capture_output=True, text=True, check=True
    ).stdout


def test_a_dead_spine_cable_is_routed_around_and_back(fabric_env: str) -> None:
    topo = build_clos(ClosSpec(hosts_per_leaf=2, leaves=2, spines=2))
    cable = cable_named(topo, "l0-s0")
    with bring_up(topo, rate_scale=0.1, prefix=fabric_env) as live:
        l1 = live.netns_of("l1")
        before = _route(l1, "10.0.0.0/24")
        assert before.count("nexthop") == 2
        live.set_cable(cable, up=False)
        live.reroute([cable])
        after = _route(l1, "10.0.0.0/24")
        assert "nexthop" not in after and "dev l1-s1" in after  # only through s1 now
        addresses = {h: str(topo.host_address(h)) for h in topo.hosts}
        netns = {h: live.netns_of(h) for h in topo.hosts}
        pairs = {(a, b) for a in topo.hosts for b in topo.hosts if a != b}
        assert ping_all_pairs(netns, addresses) == pairs  # every pair still reaches every other
        live.set_cable(cable, up=True)
        live.reroute([])
        assert _route(l1, "10.0.0.0/24") == before


def _scenario(tmp_path: Path, events: str, deadline: str = "") -> Path:
    path = tmp_path / "links.yaml"
    text = (MINI % "8000").replace("  marker: ebpf\n", f"  marker: ebpf\n  link_events:\n{events}")
    path.write_text(text + deadline)
    return path


def test_a_cable_down_and_up_mid_replay_every_flow_completes(
    fabric_env: str, tmp_path: Path
) -> None:
    # h0, h1 under l0; the All-Reduce pairs (0, 2) and (1, 3) cross the spines
    path = _scenario(
        tmp_path,
        "    - {port: l0-s0, down_at_us: 150, up_at_us: 600, reroute_after_us: 20}\n",
    )
    result = run_scenario(
        load_scenario(path),
        RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env),
    )
    assert not result.partial
    flows = pq.read_table(result.out_dir / "flows.parquet").to_pylist()
    assert flows and all(f["end_s"] is not None for f in flows)
    impairments = result.summary["impairments"]
    assert [a["action"] for a in impairments["link_events"]] == ["down", "reroute", "up"]
    for applied in impairments["link_events"]:
        # applied on time, give or take the machine (1 ms of wall time is 0.125 us here)
        assert applied["at_s"] == pytest.approx(applied["planned_s"], abs=50e-6)
    assert sum(impairments["flows_crossing_a_down_link"].values()) > 0
    assert not any("lossless" in r for r in result.summary["fidelity"]["reasons"])


def test_a_host_cut_off_ends_the_run_at_its_deadline_naming_the_flows(
    fabric_env: str, tmp_path: Path
) -> None:
    path = _scenario(
        tmp_path, "    - {port: l1-h3, down_at_us: 0}\n", deadline="  deadline_s: 12\n"
    )
    with pytest.raises(EngineFailure, match=r"deadline .* did not complete, e\.g\. \d+ \(rank"):
        run_scenario(
            load_scenario(path),
            RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env),
        )
    summary_text = (tmp_path / "out" / "summary.json").read_text()
    assert '"partial": true' in summary_text and "did not complete" in summary_text
    flows = pq.read_table(tmp_path / "out" / "flows.parquet").to_pylist()
    # the flows that started and never finished are rank 3's (others never started: they wait
    # on collectives rank 3 is part of)
    stuck = [f for f in flows if f["end_s"] is None and f["start_s"] is not None]
    assert stuck and all(3 in (f["src_rank"], f["dst_rank"]) for f in stuck)
