"""The simulation backend end to end: `emulate run --backend sim` writes the same results folder
as an emulated run, deterministically for a seed, and routes every 5-tuple as the emulated
fabric's kernels would (fabrics/ecmp.py, verified against this kernel by the system tests)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from emulator.backends import backend_name
from emulator.backends.sim.backend import sim_params
from emulator.cli import main
from emulator.errors import ScenarioError
from emulator.run import RunOptions, run_scenario
from emulator.run.pipeline import reference_scenario, scenario_text
from emulator.scenario import load_scenario
from emulator.sim.fabric import SimFabricParams, build_fabric
from emulator.sim.port import Frame
from emulator.sim.replay import SimReplay
from fabrics.spec import ClosSpec
from fabrics.topology import HOST_IFNAME, build_clos

SMALL = """\
name: small_mix
workload:
  generate:
    kind: moe_mix
    ranks: 8
    expert_parallel_size: 4
    dispatch_bytes: 262144
    allreduce_bytes: 2097152
    iterations: 2
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  host_link_gbps: 100
  fabric_link_gbps: 100
run:
  backend: sim
  seed: {seed}
sim:
  sample_interval_us: 50
metrics:
  prometheus: {{enabled: false}}
"""

# summary.json keys that read the wall clock (how fast this machine simulated), nothing else
WALL_KEYS = {
    "wall_time": None,
    "engine": (
        "wall_s",
        "replay_wall_s",
        "cpu_s",
        "packet_hops_per_wall_s",
        "max_rss_kb",
        "gc_pauses",
    ),
}


def _run(tmp_path: Path, seed: int, name: str, draw_seed: int = 0) -> dict[str, Any]:
    scenario = tmp_path / f"{name}.yaml"
    text = SMALL.format(seed=seed)
    if draw_seed:
        text = text.replace("sim:\n", f"sim:\n  draw_seed: {draw_seed}\n")
    scenario.write_text(text)
    out = tmp_path / name
    assert main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "summary.json").read_text())


def _without_wall(summary: dict[str, Any]) -> str:
    summary = dict(summary)
    for key, inner in WALL_KEYS.items():
        if inner is None:
            summary.pop(key, None)
        else:
            summary[key] = {k: v for k, v in summary[key].items() if k not in inner}
    return json.dumps(summary, sort_keys=True)


def test_same_seed_same_summary_and_every_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # a simulation needs no root
    first = _run(tmp_path, 3, "a")
    again = _run(tmp_path, 3, "b")
    other = _run(tmp_path, 4, "c")
    assert first["backend"] == "sim" and first["time"] == "simulated"
    assert first["fidelity"]["verdict"] == "ok" and first["fidelity"]["leaves_out"]
    assert first["flows"]["finished"] == first["flows"]["planned"] > 0
    assert set(first["collectives"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    assert _without_wall(first) == _without_wall(again)
    for table in ("flows", "collectives", "ports", "nic", "queue_pairs"):
        assert (tmp_path / "a" / f"{table}.parquet").read_bytes() == (
            tmp_path / "b" / f"{table}.parquet"
        ).read_bytes(), table
    assert _without_wall(first) != _without_wall(other)  # another seed, other source ports
    # sim.draw_seed: the same flows on the same source ports (so the same paths), other marks
    drawn = _run(tmp_path, 3, "d", draw_seed=1)
    assert drawn["fabric_backend"]["draw_seed"] == 1 and first["fabric_backend"]["draw_seed"] == 0
    flows = {
        name: pq.read_table(tmp_path / name / "flows.parquet").to_pydict() for name in ("a", "d")
    }
    assert flows["a"]["udp_sport"] == flows["d"]["udp_sport"]
    assert flows["a"]["flow_id"] == flows["d"]["flow_id"]
    assert sum(flows["a"]["ce_marks"]) > 0 and flows["a"]["ce_marks"] != flows["d"]["ce_marks"]


def test_the_results_folder_has_what_an_emulated_run_writes(tmp_path: Path) -> None:
    summary = _run(tmp_path, 0, "r")
    folder = tmp_path / "r"
    for name in (
        "summary.json",
        "flows.parquet",
        "collectives.parquet",
        "ports.parquet",
        "nic.parquet",
        "queue_pairs.parquet",
        "scenario.yaml",
    ):
        assert (folder / name).is_file(), name
    assert list((folder / "plots").glob("*.png"))
    import pyarrow.parquet as pq

    ports = pq.read_table(folder / "ports.parquet").to_pylist()
    # exact queue depth of every switch port, sampled in simulated time
    assert {r["switch"] for r in ports} >= {"l0", "l1", "s0", "s1"}
    assert max(r["queue_bytes"] for r in ports) > 0
    assert all(r["pause_s"] is not None for r in ports)
    assert summary["pfc"]["enabled"] is True
    rows = pq.read_table(folder / "queue_pairs.parquet").to_pylist()
    assert sum(r["data_bytes_received"] for r in rows) > 0
    assert all(r["lost_packets"] == 0 for r in rows)


def test_sim_and_emulation_route_every_five_tuple_identically() -> None:
    """The simulator's switches choose each hop with Topology.next_hop, the function
    Topology.path (the emulated fabric's prediction, checked against the kernel in
    tests/system/test_fabric_clos.py) uses: follow a frame hop by hop and compare."""
    spec = ClosSpec(hosts_per_leaf=2, leaves=3, spines=3, parallel_links=2)
    topology = build_clos(spec)
    fabric = build_fabric(topology, SimFabricParams(), seed=0, events=SimReplay.event_list())
    rng = random.Random(5)
    hosts = topology.hosts
    for _ in range(200):
        src, dst = rng.sample(hosts, 2)
        sport = rng.randrange(49152, 65536)
        src_ip, dst_ip = topology.host_address(src), topology.host_address(dst)
        mhash = topology.flow_hash(src_ip, dst_ip, sport)
        frame = Frame(src, dst, sport, 1000, 0, b"", False, mhash)
        walked = [fabric.ports[(src, HOST_IFNAME)].name]
        node = topology.links[(src, HOST_IFNAME)].dst
        while node != dst:
            hop = fabric.switches[node]._route(frame)
            assert hop is not None
            walked.append(hop.name)
            switch, ifname = hop.name.split(":")
            node = topology.links[(switch, ifname)].dst
        expected = [f"{link.src}:{link.src_ifname}" for link in topology.path(src, dst, sport)]
        assert walked == expected
        # the reverse direction (ACKs, CNPs: from 4791 to the sport) hashes the same
        assert topology.flow_hash(dst_ip, src_ip, 4791, sport) == mhash


def test_backend_choice_and_what_each_refuses(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SMALL.format(seed=0).replace("  backend: sim\n", ""))
    scenario = load_scenario(path)
    assert backend_name(scenario) == "netns"
    assert backend_name(scenario, "sim") == "sim"
    with pytest.raises(ScenarioError, match=r"run\.backend: dut runs a dut fabric"):
        backend_name(scenario, "dut")
    latency = tmp_path / "latency.yaml"
    latency.write_text(
        SMALL.format(seed=0)
        .replace("backend: sim", "backend: netns")
        .replace("  fabric_link_gbps: 100\n", "  fabric_link_gbps: 100\n  switch_latency_ns: 500\n")
    )
    assert main(["run", str(latency), "--no-progress", "--out", str(tmp_path / "x")]) != 0
    assert not (tmp_path / "x").exists()  # refused before anything was made
    # marking on departure: only the simulator can (the emulated markers run before the queue)
    departure = tmp_path / "departure.yaml"
    departure.write_text(
        SMALL.format(seed=0)
        .replace("backend: sim", "backend: netns")
        .replace(
            "  fabric_link_gbps: 100\n", "  fabric_link_gbps: 100\n  ecn_mark_point: departure\n"
        )
    )
    with pytest.raises(ScenarioError, match=r"fabric\.ecn_mark_point: departure asked"):
        run_scenario(load_scenario(departure), RunOptions(out_dir=tmp_path / "y"))
    assert not (tmp_path / "y").exists()
    # auto: departure in simulation (HPCC's switch), arrival for the emulated run's reference
    auto = load_scenario(path)
    assert sim_params(auto).ecn_mark_on_arrival is False
    reference = reference_scenario(auto)
    assert reference.fabric.ecn_mark_point == "arrival"
    assert sim_params(reference).ecn_mark_on_arrival is True
    assert not reference.metrics.prometheus.enabled
    # the reference folder's scenario.yaml replays the reference: marking point and draw written
    drawn = dataclasses.replace(reference, sim=dataclasses.replace(reference.sim, draw_seed=2))
    written = yaml.safe_load(scenario_text(drawn))
    assert written["fabric"]["ecn_mark_point"] == "arrival" and written["sim"]["draw_seed"] == 2
    assert scenario_text(auto) == path.read_text()  # nothing changed: the file as it is
    assert main(["run", str(path), "--backend", "sim", "--tdf", "10"]) != 0


def test_cnps_outside_the_priority_class_run_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CNPs on a DSCP the ports do not serve first still run (a user may want to see that), but
    # the summary says so; the default pair (cnp_dscp 48, priority_dscps [48]) says nothing
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert _run(tmp_path, 0, "default")["warnings"] == []
    scenario = tmp_path / "late.yaml"
    scenario.write_text(
        SMALL.format(seed=0).replace("  kind: clos\n", "  kind: clos\n  priority_dscps: [46]\n")
    )
    assert main(["run", str(scenario), "--out", str(tmp_path / "late"), "--no-progress"]) == 0
    warnings = json.loads((tmp_path / "late" / "summary.json").read_text())["warnings"]
    assert any("cnp_dscp 48 is not in fabric.priority_dscps [46]" in w for w in warnings)


def test_attribution_accounts_for_every_queued_byte_and_every_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the simulator tags every frame with its flow and collective: per port, the attributed
    # queue equals the port's queue at every sample, and the attributed marks its marks
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    summary = _run(tmp_path, 0, "attributed")
    folder = tmp_path / "attributed"
    attribution = pq.read_table(folder / "attribution.parquet").to_pylist()
    marks = pq.read_table(folder / "marks.parquet").to_pylist()
    ports = pq.read_table(folder / "ports.parquet").to_pylist()
    flows = pq.read_table(folder / "flows.parquet").to_pylist()
    assert attribution and marks
    held: dict[tuple[float, str, str], int] = {}
    for row in attribution:
        key = (row["time_s"], row["switch"], row["port"])
        held[key] = held.get(key, 0) + row["queue_bytes"]
    switch_rows = [p for p in ports if not p["switch"].startswith("h")]
    for p in switch_rows:
        assert held.get((p["time_s"], p["switch"], p["port"]), 0) == p["queue_bytes"], p
    by_port: dict[tuple[str, str], int] = {}
    for row in attribution:
        by_port[(row["switch"], row["port"])] = (
            by_port.get((row["switch"], row["port"]), 0) + row["ecn_marks"]
        )
    port_marks: dict[tuple[str, str], int] = {}
    for p in switch_rows:  # cumulative counters: the last sample holds the total
        port_marks[(p["switch"], p["port"])] = p["ecn_marks"]
    assert {k: v for k, v in by_port.items() if v} == {k: v for k, v in port_marks.items() if v}
    assert len(marks) == sum(port_marks.values())
    # a packet marked at two hops counts twice here and once at its receiver
    per_flow: dict[int, int] = {}
    for m in marks:
        per_flow[m["flow_id"]] = per_flow.get(m["flow_id"], 0) + 1
    kinds = {f["flow_id"]: f["collective_type"] for f in flows}
    assert all(kinds[m["flow_id"]] == m["collective_type"] for m in marks)
    assert all(per_flow.get(f["flow_id"], 0) >= f["ce_marks"] for f in flows)
    section = summary["attribution"]
    assert section["measured"] is True and section["ports"]
    for port in section["ports"]:
        assert sum(port["queue_share"].values()) == pytest.approx(1.0)
        assert port["top_interferer"] in port["queue_share"]
    assert (folder / "plots" / "attribution_queue.png").stat().st_size > 0


def test_the_replay_runs_on_a_frozen_heap_thawed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the run built before the replay is out of the collector's way during it (gc.freeze)
    and back after; summary.json says what the replay's own collections cost. A heap someone
    else froze stays frozen."""
    import gc

    import emulator.backends.sim.backend as sim_backend

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    during: list[int] = []
    real = sim_backend.run_in_simulated_time

    def watched(*args: Any, **kwargs: Any) -> Any:
        during.append(gc.get_freeze_count())
        return real(*args, **kwargs)

    monkeypatch.setattr(sim_backend, "run_in_simulated_time", watched)
    assert gc.get_freeze_count() == 0
    summary = _run(tmp_path, 3, "a")
    assert during and during[0] > 1000, "the heap was not frozen for the replay"
    assert gc.get_freeze_count() == 0, "the heap stayed frozen after the run"
    pauses = summary["engine"]["gc_pauses"]
    assert pauses["frozen"] and len(pauses["collections"]) == 3
    assert 0 <= pauses["max_s"] <= pauses["total_s"]
    gc.freeze()  # a caller's own frozen heap: left to it
    try:
        summary = _run(tmp_path, 3, "b")
        assert not summary["engine"]["gc_pauses"]["frozen"]
        assert gc.get_freeze_count() > 0  # not thawed (frozen objects freed since leave it)
    finally:
        gc.unfreeze()
