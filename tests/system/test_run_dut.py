"""scenarios/moe_mix_dut.yaml through `emulate run` against a software DUT: a router namespace
with four ports and the eBPF marker, standing in for a physical switch. The scenario is the
shipped file with only the lab-specific keys replaced (interface names, addresses, rate) and the
workload shrunk, as a lab user would adapt it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from fabrics.iproute import ip, run
from fabrics.spec import DutSpec
from tests.system.software_dut import DUT_RATE_BPS, PORTS
from tests.system.software_dut import software_dut as make_software_dut

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def software_dut(fabric_env: str) -> Iterator[tuple[str, list[str]]]:
    with make_software_dut(fabric_env) as dut:
        yield dut


def test_moe_mix_dut_scenario_runs_against_the_software_dut(
    software_dut: tuple[str, list[str]], fabric_env: str, tmp_path: Path
) -> None:
    _, cables = software_dut
    shipped = load_scenario(REPO / "scenarios" / "moe_mix_dut.yaml")
    assert isinstance(shipped.fabric, DutSpec) and shipped.run.time_dilation == 1
    assert shipped.workload is not None
    fabric = dataclasses.replace(
        shipped.fabric,
        interfaces=tuple(cables),
        addresses=tuple(f"192.168.{70 + i}.2/24" for i in range(PORTS)),
        gateways=tuple(f"192.168.{70 + i}.1" for i in range(PORTS)),
        routes=("192.168.64.0/20",),
        allowlist=("192.168.64.0/20",),
        # NICs twice as fast as the switch's ports (a 200G NIC on a 100G port): a flow alone
        # already fills its egress port, so the queue and its CE marks do not depend on two
        # flows happening to overlap there (at equal rates each NIC splits its rate between
        # its All-to-All and All-Reduce flows and a port sees 2:1 only by chance: 0-7 marks
        # per run, none in about one run in three)
        max_rate_gbps=2 * DUT_RATE_BPS / 1e9,
    )
    generate = dataclasses.replace(
        shipped.workload.generate,
        ranks=PORTS,
        expert_parallel_size=2,
        dispatch_bytes=128 << 10,
        allreduce_bytes=512 << 10,
        iterations=2,
    )
    scenario = dataclasses.replace(
        shipped,
        fabric=fabric,
        # a 100 Mb/s port holding Kmax (80 KB) queues for 6.4 ms: the timeout must exceed that,
        # as a lab sets the NIC's ack timeout above its switch's worst queueing delay
        transport=dataclasses.replace(shipped.transport, retransmit_timeout_s=0.1),
        workload=dataclasses.replace(shipped.workload, generate=generate),
        metrics=dataclasses.replace(
            shipped.metrics,
            prometheus=dataclasses.replace(shipped.metrics.prometheus, port=0),
        ),
    )
    result = run_scenario(
        scenario,
        RunOptions(
            out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env, say=lambda m: None
        ),
    )
    assert not result.partial
    summary = result.summary
    assert summary["tdf"] == 1 and summary["marker"] == "dut"
    collectives = pq.read_table(result.out_dir / "collectives.parquet").to_pylist()
    assert len(collectives) == 12 and all(c["complete"] for c in collectives)
    flows = pq.read_table(result.out_dir / "flows.parquet").to_pylist()
    assert all(f["fct_s"] > 0 for f in flows)
    # 200 Mb/s NICs into 100 Mb/s DUT ports build queues there: CE marks, CNPs back
    assert sum(f["ce_marks"] for f in flows) > 0 and sum(f["cnps_sent"] for f in flows) > 0
    # the rate cap held: no rank's NIC above its max rate (a few % of sampling jitter)
    nic = pq.read_table(result.out_dir / "nic.parquet").to_pylist()
    assert nic and max(r["utilization"] for r in nic) <= 1.1
    # the interfaces are back in the root namespace
    for name in cables:
        assert run(ip("-o", "link", "show", "dev", name)).strip()
