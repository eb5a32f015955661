"""scenarios/switch_tests/ through `emulate run`: the DUT cases against a software DUT (a router
namespace with the eBPF ECN marker) with only the lab keys replaced and the bytes shrunk, as a
lab would adapt them; the ECMP cases as shipped on the emulated Clos. Each run's expectations
are judged by the run itself; the test checks the verdicts it printed, case by case."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.cli import main
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from fabrics.spec import DutSpec
from tests.system.software_dut import DUT_RATE_BPS, PORTS, port_address, software_dut

pytestmark = pytest.mark.system

CASES = Path(__file__).resolve().parents[2] / "scenarios" / "switch_tests"
PASS, FAIL, NA = "PASS", "FAIL", "NOT APPLICABLE"

# What a software DUT (no PFC) must give for each DUT case, expectation by expectation.
DUT_CASES = {
    "basic_dataplane": [PASS, PASS, PASS],
    "incast_dcqcn": [PASS, PASS, PASS, PASS, PASS],
    "incast_no_dcqcn": [PASS, PASS, NA, NA],
    "qp_fairness": [NA, PASS, PASS, PASS],
    "pfc_generation": [PASS, NA, NA],
}


@pytest.fixture(scope="module")
def dut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    import os

    with software_dut(f"st{os.getpid() % 100000}-") as (_, cables):
        yield cables


def on_the_software_dut(shipped: Scenario, cables: list[str]) -> Scenario:
    """The lab keys replaced (ports, addresses, rate) and each pair's bytes shrunk to fit
    100 Mb/s ports."""
    assert isinstance(shipped.fabric, DutSpec)
    fabric = dataclasses.replace(
        shipped.fabric,
        interfaces=tuple(cables),
        addresses=tuple(port_address(i) for i in range(PORTS)),
        gateways=tuple(f"192.168.{70 + i}.1" for i in range(PORTS)),
        routes=("192.168.64.0/20",),
        allowlist=("192.168.64.0/20",),
        max_rate_gbps=DUT_RATE_BPS / 1e9,
    )
    traffic = tuple(
        dataclasses.replace(p, bytes_per_pair=2 << 20, message_bytes=256 << 10)
        for p in shipped.traffic
    )
    metrics = dataclasses.replace(
        shipped.metrics, prometheus=dataclasses.replace(shipped.metrics.prometheus, port=0)
    )
    # DCQCN's rate steps are NIC defaults for 100 Gb/s ports (a 50 Mb/s hyper increase every
    # 300 us is half of a 100 Mb/s port): scaled to the port, as a lab tunes them to its speed
    scale = DUT_RATE_BPS / 100e9
    d = shipped.transport.dcqcn
    dcqcn = dataclasses.replace(
        d,
        rpg_ai_rate_mbps=d.rpg_ai_rate_mbps * scale,
        rpg_hai_rate_mbps=d.rpg_hai_rate_mbps * scale,
        rpg_min_rate_mbps=d.rpg_min_rate_mbps * scale,
    )
    transport = dataclasses.replace(shipped.transport, dcqcn=dcqcn)
    return dataclasses.replace(
        shipped, fabric=fabric, traffic=traffic, metrics=metrics, transport=transport
    )


@pytest.mark.parametrize("case", sorted(DUT_CASES))
def test_dut_case_against_the_software_dut(
    case: str, dut: list[str], fabric_env: str, tmp_path: Path
) -> None:
    scenario = on_the_software_dut(load_scenario(CASES / f"{case}.yaml"), dut)
    result = run_scenario(
        scenario,
        RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env, say=print),
    )
    verdicts = result.summary["expectations"]
    statuses = [v["status"] for v in verdicts]
    assert statuses == DUT_CASES[case], json.dumps(verdicts, indent=1)
    assert result.failed_expectations == 0 and not result.partial
    # PFC per rank: what our generator sent; veth ports count no PFC received (null, not 0)
    ranks = result.summary["ranks"]
    assert all(r["pfc_frames_received"] is None for r in ranks.values())
    sent = {int(k): r["pfc_frames_sent"] for k, r in ranks.items() if r["pfc_frames_sent"]}
    assert sorted(sent) == sorted(g.rank for g in scenario.run.pfc_frames)
    # the tester's counters are in the results, one row per QP with its pattern
    qps = pq.read_table(result.out_dir / "queue_pairs.parquet").to_pylist()
    names = {p.name for p in scenario.traffic}
    assert qps and {q["pattern"] for q in qps} == names
    assert sum(q["data_bytes_received"] for q in qps) == sum(
        (2 << 20) * len(p.flow_pairs()) for p in scenario.traffic
    )


FLIPPED_TRIES = 3


def test_a_failed_expectation_exits_1(dut: list[str], fabric_env: str, tmp_path: Path) -> None:
    """The basic case with its `ce_seen: false` turned around must fail, and `emulate run`
    exits 1 so a lab's CI stops.

    Its premise, half line rate builds no queue, holds while the engine keeps time: in one CI
    run (2026-12-02) the workers' ticks came 10 ms late at p99 in this 0.4 s replay (a stall of
    the machine; at TDF 1 on 100 Mb/s ports the verdict reads degraded here every time, its
    limits being DCQCN's microseconds) and the burst after it marked 1 packet of 2048, so the
    flipped expectation passed. Retried: a majority of FLIPPED_TRIES runs must fail it (each
    printed), stopping once that majority is reached."""
    scenario = on_the_software_dut(load_scenario(CASES / "basic_dataplane.yaml"), dut)
    flipped = tuple(
        dataclasses.replace(e, holds=True) if e.check == "ce_seen" else e for e in scenario.expect
    )
    scenario = dataclasses.replace(scenario, expect=flipped)
    held = 0
    for attempt in range(1, FLIPPED_TRIES + 1):
        result = run_scenario(
            scenario,
            RunOptions(
                out_dir=tmp_path / f"out-{attempt}",
                progress=False,
                fabric_prefix=fabric_env,
                say=print,
            ),
        )
        statuses = [v["status"] for v in result.summary["expectations"]]
        ok = statuses == [PASS, PASS, FAIL] and result.failed_expectations == 1
        held += ok
        verdict = result.summary["fidelity"]["verdict"]
        print(
            f"try {attempt}: expectations {statuses}, fidelity {verdict}: {'held' if ok else 'not'}"
        )
        if held * 2 > FLIPPED_TRIES:
            break
    assert held * 2 > FLIPPED_TRIES, f"{held} of {FLIPPED_TRIES} tries held"


@pytest.mark.parametrize(
    ("case", "spread"), [("ecmp_spread_1qp", "not uplink_spread"), ("ecmp_spread_xqp", "uplink")]
)
def test_ecmp_case_on_the_emulated_clos(
    case: str, spread: str, fabric_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    # the shipped file, its exporter on a free port (a fixed one may be taken on a CI machine)
    path = tmp_path / f"{case}.yaml"
    path.write_text((CASES / f"{case}.yaml").read_text() + "metrics: {prometheus: {port: 0}}\n")
    code = main(
        [
            "run",
            str(path),
            "--out",
            str(out),
            "--no-progress",
            "--netns-prefix",
            fabric_env,
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    verdicts = json.loads((out / "summary.json").read_text())["expectations"]
    assert [v["status"] for v in verdicts] == [PASS, PASS, PASS], printed
    assert verdicts[2]["expectation"].startswith(spread)
    assert "3 passed, 0 failed, 0 not applicable" in printed


@pytest.mark.parametrize("case", ["spray_1qp", "entropy_1qp", "flowlet_1qp", "ars_adaptive"])
def test_multipath_case_on_the_emulated_clos(
    case: str, fabric_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The BMWG spray and flowlet procedures, MRC-style tester entropy and the SONiC ARS case
    against the software switch (the emulated Clos's leaves balance, or hash the tester's
    entropy): every expectation passes, and spread, MMR and reordering are reported."""
    out = tmp_path / "out"
    path = tmp_path / f"{case}.yaml"
    path.write_text((CASES / f"{case}.yaml").read_text() + "metrics: {prometheus: {port: 0}}\n")
    code = main(
        ["run", str(path), "--out", str(out), "--no-progress", "--netns-prefix", fabric_env]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    verdicts = json.loads((out / "summary.json").read_text())["expectations"]
    assert {v["status"] for v in verdicts} == {PASS}, printed
    checks = [v["expectation"].split()[0] for v in verdicts]
    assert "uplink_spread" in checks and "link_balance" in checks and "reordering" in checks
