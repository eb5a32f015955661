"""scenarios/moe_mix_dut.yaml through `emulate run` against a software DUT: a router namespace
with four ports and the eBPF marker, standing in for a physical switch. The scenario is the
shipped file with only the lab-specific keys replaced (interface names, addresses, rate) and the
workload shrunk, as a lab user would adapt it."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from fabrics.ecn import ebpf
from fabrics.iproute import ip, run, run_batch, tc
from fabrics.spec import DutSpec

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
PORTS = 4
DUT_RATE_BPS = 1e8


@pytest.fixture
def software_dut(fabric_env: str) -> Iterator[tuple[str, list[str]]]:
    """A router namespace with PORTS ports marking ECN at DUT_RATE_BPS; the other end of each
    cable stays in the root namespace as the interface a rank is given. Removed afterwards."""
    dut = f"{fabric_env}dut"
    cables = [f"{fabric_env}d{i}" for i in range(PORTS)]
    run_batch([ip("netns", "add", dut)])
    try:
        run_batch(
            [
                ip("link", "add", name, "type", "veth", "peer", "name", f"p{i}", "netns", dut)
                for i, name in enumerate(cables)
            ]
        )
        run_batch(
            [ip("link", "set", "lo", "up", netns=dut)]
            + [
                ip("addr", "add", f"192.168.{70 + i}.1/24", "dev", f"p{i}", netns=dut)
                for i in range(PORTS)
            ]
            + [ip("link", "set", f"p{i}", "mtu", "9000", "up", netns=dut) for i in range(PORTS)]
        )
        # a switch port drains at its line rate: HTB at DUT_RATE_BPS under the marker
        shaping = []
        for i in range(PORTS):
            shaping += [
                tc(
                    "qdisc",
                    "add",
                    "dev",
                    f"p{i}",
                    "root",
                    "handle",
                    "1:",
                    "htb",
                    "default",
                    "1",
                    netns=dut,
                ),
                tc(
                    "class",
                    "add",
                    "dev",
                    f"p{i}",
                    "parent",
                    "1:",
                    "classid",
                    "1:1",
                    "htb",
                    "rate",
                    f"{int(DUT_RATE_BPS)}bit",
                    netns=dut,
                ),
                tc(
                    "qdisc",
                    "add",
                    "dev",
                    f"p{i}",
                    "parent",
                    "1:1",
                    "bfifo",
                    "limit",
                    "1000000",
                    netns=dut,
                ),
            ]
        run_batch(shaping)
        run(ip("netns", "exec", dut, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        obj = ebpf.compiled_object()
        run_batch([c for i in range(PORTS) for c in ebpf.attach_commands(dut, f"p{i}", obj)])
        progs = ebpf.discover(dut)
        maps = ebpf.maps_of(list(progs.values()))
        for pid in progs.values():
            ebpf.write_params(
                maps[pid], ebpf.MarkerParams(DUT_RATE_BPS, 20_000, 80_000, 0.2, 1_000_000)
            )
        yield dut, cables
    finally:
        for name in cables:
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
        run_batch([ip("netns", "del", dut)])


def test_moe_mix_dut_scenario_runs_against_the_software_dut(
    software_dut: tuple[str, list[str]], fabric_env: str, tmp_path: Path
) -> None:
    _, cables = software_dut
    shipped = load_scenario(REPO / "scenarios" / "moe_mix_dut.yaml")
    assert isinstance(shipped.fabric, DutSpec) and shipped.run.time_dilation == 1
    fabric = dataclasses.replace(
        shipped.fabric,
        interfaces=tuple(cables),
        addresses=tuple(f"192.168.{70 + i}.2/24" for i in range(PORTS)),
        gateways=tuple(f"192.168.{70 + i}.1" for i in range(PORTS)),
        routes=("192.168.64.0/20",),
        allowlist=("192.168.64.0/20",),
        max_rate_gbps=DUT_RATE_BPS / 1e9,
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
    # the All-to-All incast into a 100 Mb/s DUT port builds a queue there: CE marks, CNPs back
    assert sum(f["ce_marks"] for f in flows) > 0 and sum(f["cnps_sent"] for f in flows) > 0
    # the rate cap held: no rank's NIC above its max rate (a few % of sampling jitter)
    nic = pq.read_table(result.out_dir / "nic.parquet").to_pylist()
    assert nic and max(r["utilization"] for r in nic) <= 1.1
    # the interfaces are back in the root namespace
    for name in cables:
        assert run(ip("-o", "link", "show", "dev", name)).strip()
