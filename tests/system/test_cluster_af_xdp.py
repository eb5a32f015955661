"""`engine.send_path: af_xdp` over a Ray cluster on this machine (emulator.backends.cluster.local, as
tests/system/test_cluster.py runs it): the software DUT's ports split over two servers, each
server's workers open AF_XDP ports on their own interfaces, and each server's engine actor
records the ports' XDP programs in its own state file before they are attached. The run
delivers every byte, says af_xdp with every port recorded, and leaves both servers clean."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.backends.cluster.local import LocalCluster, local_cluster
from emulator.engine.af_xdp_setup import attached_prog_id
from emulator.native import load
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.cluster import ClusterSpec, ServerSpec
from fabrics.iproute import ip, run
from tests.system.prereq import require
from tests.system.software_dut import PORTS, software_dut
from tests.system.test_switch_tests import CASES, on_the_software_dut

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if os.geteuid() != 0:
        require("needs root (namespaces, XDP)")
    mod, why = load("xsk")
    if mod is None:
        require(f"AF_XDP extension: {why}")
    with local_cluster(tmp_path_factory.mktemp("cluster-state")) as cluster:
        yield cluster


def test_af_xdp_over_two_servers_records_each_port_where_it_is(
    lab: LocalCluster, tmp_path: Path, fabric_env: str
) -> None:
    with software_dut(fabric_env) as (_, cables):
        shipped = on_the_software_dut(load_scenario(CASES / "incast_dcqcn.yaml"), cables)
        half = PORTS // 2
        cluster = ClusterSpec(
            workers_per_server=1,
            servers=(
                ServerSpec(
                    name="a", interfaces=tuple(cables[:half]), state_dir=str(lab.state_dir / "a")
                ),
                ServerSpec(
                    name="b", interfaces=tuple(cables[half:]), state_dir=str(lab.state_dir / "b")
                ),
            ),
        )
        scenario = dataclasses.replace(
            shipped,
            run=dataclasses.replace(shipped.run, cluster=cluster),
            engine=dataclasses.replace(shipped.engine, send_path="af_xdp"),
        )
        result = run_scenario(
            scenario,
            RunOptions(
                out_dir=tmp_path / "out",
                progress=False,
                fabric_prefix=fabric_env,
                cluster=lab.address,
                say=lambda m: None,
            ),
        )
        assert not result.partial
        engine = result.summary["engine"]
        assert result.summary["backend"] == "cluster" and engine["send_path"] == "af_xdp"
        ports = {p["interface"]: p for p in engine["af_xdp"]["ports"]}
        assert sorted(ports) == sorted(cables)
        for port in ports.values():
            assert port["ledger_recorded"] is True  # in its server's own state file
            assert port["counters"]["tx_packets"] > 0
        qps = pq.read_table(result.out_dir / "queue_pairs.parquet").to_pylist()
        assert sum(q["data_bytes_received"] for q in qps) == sum(
            (2 << 20) * len(p.flow_pairs()) for p in scenario.traffic
        )
        # every server gave its interfaces back, with no XDP program left on them
        for name in cables:
            assert run(ip("-o", "link", "show", "dev", name)).strip()
            assert attached_prog_id(name, None) == 0
    assert not (lab.state_dir / "a" / "state.json").exists()
    assert not (lab.state_dir / "b" / "state.json").exists()
