"""The shipped scenarios load and plan, the study's three scenarios differ by one switch, the DUT
scenario's allowlist covers its ranks, and the generated scenario reference matches the model."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path

import pytest

from emulator import chakra
from emulator.cli import main
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario, WorkloadSpec
from emulator.scenario.reference import render
from fabrics.dut import DestinationRefused, check_destination
from fabrics.spec import ClosSpec, DutSpec

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
TRACES = ROOT.parent / "shared" / "traces"
SHIPPED = {
    "moe_mix",
    "allreduce_only",
    "alltoall_only",
    "moe_mix_dut",
    "dlrm_trace",
}


def workload_of(scenario: Scenario) -> WorkloadSpec:
    """The scenario's trace workload (these scenarios all have one)."""
    assert scenario.workload is not None
    return scenario.workload


def test_the_issue_8_scenarios_are_shipped() -> None:
    assert {p.stem for p in SCENARIOS} >= SHIPPED


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.source == path


def _needs_shared_traces(path: Path) -> bool:
    return any(
        job.trace is not None and "shared/traces" in job.trace for job in load_scenario(path).jobs
    )


# Scenarios at cluster scale: planning one takes minutes (moe_mix_1024: 639k flows, ~3 min here),
# so `python -m bench.flow --1024` (--16384) plans and runs it; here its ranks are checked
# without a plan.
AT_SCALE = {"moe_mix_1024.yaml", "moe_mix_16384.yaml"}


def _world(scenario: Scenario) -> int:
    return sum(
        job.generate.ranks
        if job.trace is None
        else chakra.load_trace_set(scenario.resolve(job.trace)).world_size
        for job in scenario.jobs
    )


@pytest.mark.parametrize("path", [p for p in SCENARIOS if p.name in AT_SCALE], ids=lambda p: p.name)
def test_scenarios_at_scale_have_a_rank_per_host(path: Path) -> None:
    scenario = load_scenario(path)
    assert _world(scenario) == scenario.fabric.host_count


@pytest.mark.parametrize(
    "path", [p for p in SCENARIOS if p.name not in AT_SCALE], ids=lambda p: p.name
)
def test_shipped_scenarios_plan(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = load_scenario(path)
    if _needs_shared_traces(path) and not TRACES.is_dir():
        pytest.skip(f"real traces folder {TRACES} is absent")
    assert main(["plan", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["flows_total"] > 0 and document["bytes_total"] > 0
    assert document["ideal_job_time_s"] > 0
    # The workloads' ranks are exactly the fabric's hosts: no idle host, no rank without one.
    world = _world(scenario)
    fabric = scenario.fabric
    hosts = len(fabric.interfaces) if isinstance(fabric, DutSpec) else fabric.host_count
    assert world == hosts


@pytest.mark.parametrize("suffix", ["", "_ecmp", "_strided"])
def test_study_scenarios_differ_from_the_mix_by_one_switch(suffix: str) -> None:
    mix = load_scenario(ROOT / "scenarios" / f"moe_mix{suffix}.yaml")
    assert (
        workload_of(mix).generate.include_alltoall and workload_of(mix).generate.include_allreduce
    )
    for name, switch in (
        (f"allreduce_only{suffix}", "include_alltoall"),
        (f"alltoall_only{suffix}", "include_allreduce"),
    ):
        alone = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
        expected = dataclasses.replace(
            mix,
            name=name,
            description=alone.description,
            workload=dataclasses.replace(
                workload_of(mix),
                generate=dataclasses.replace(workload_of(mix).generate, **{switch: False}),
            ),
        )
        assert alone == expected, name


def test_the_main_mix_differs_from_the_ecmp_bound_one_by_placement_and_source_ports() -> None:
    mix = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    ecmp = load_scenario(ROOT / "scenarios" / "moe_mix_ecmp.yaml")
    assert workload_of(mix).generate.expert_placement == "split"
    assert mix.collectives.sport_policy == "balanced" and ecmp.collectives.sport_policy == "hash"
    generate = dataclasses.replace(workload_of(ecmp).generate, expert_placement="split")
    expected = dataclasses.replace(
        ecmp,
        name="moe_mix",
        description=mix.description,
        workload=dataclasses.replace(workload_of(ecmp), generate=generate),
        collectives=dataclasses.replace(ecmp.collectives, sport_policy="balanced"),
    )
    assert mix == expected


def test_the_strided_mix_differs_from_the_ecmp_bound_one_by_its_placement_only() -> None:
    mix = load_scenario(ROOT / "scenarios" / "moe_mix_ecmp.yaml")
    strided = load_scenario(ROOT / "scenarios" / "moe_mix_strided.yaml")
    assert workload_of(mix).generate.expert_placement == "contiguous"
    generate = dataclasses.replace(workload_of(mix).generate, expert_placement="strided")
    expected = dataclasses.replace(
        mix,
        name="moe_mix_strided",
        description=strided.description,
        workload=dataclasses.replace(workload_of(mix), generate=generate),
    )
    assert strided == expected


def test_dut_scenario_is_the_mix_workload_behind_an_allowlist() -> None:
    mix = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    dut = load_scenario(ROOT / "scenarios" / "moe_mix_dut.yaml")
    assert dut.workload == mix.workload
    assert isinstance(dut.fabric, DutSpec)
    spec = dut.fabric
    assert len(spec.interfaces) == len(spec.addresses) == workload_of(dut).generate.ranks == 16
    assert len(set(spec.interfaces)) == 16 and spec.namespaces
    allowed = [ipaddress.ip_network(p) for p in spec.allowlist]
    for rank, cidr in enumerate(spec.addresses):
        address = ipaddress.ip_interface(cidr).ip
        assert any(address in net for net in allowed), cidr
        check_destination(spec, rank, str(address), spec.interfaces[rank])  # does not raise
        # The gateway of each rank is on its own subnet, and the routes lead to every other rank.
        assert ipaddress.ip_address(spec.gateways[rank]) in ipaddress.ip_interface(cidr).network
        assert any(address in ipaddress.ip_network(r) for r in spec.routes)
    # The allowlist is narrow: nothing outside the ranks' /16, and not out of another port.
    with pytest.raises(DestinationRefused, match=r"outside fabric\.allowlist"):
        check_destination(spec, 0, "10.11.0.2")
    with pytest.raises(DestinationRefused, match="not rank 0's declared interface"):
        check_destination(spec, 0, "10.10.1.2", spec.interfaces[1])
    # Rates are capped, and a physical switch is not time-dilated.
    assert 0 < spec.max_rate_gbps * 16 <= 40
    assert dut.run.time_dilation == 1.0
    assert spec.mtu_bytes is not None and spec.mtu_bytes > dut.transport.path_mtu_bytes


def test_real_trace_scenario_resolves_to_the_shared_traces() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "dlrm_trace.yaml")
    trace = workload_of(scenario).trace
    assert trace is not None
    prefix = scenario.resolve(trace).resolve()
    # From a fresh clone: the traces live in ../shared/traces beside the repository.
    assert prefix.is_relative_to(TRACES.resolve())
    assert isinstance(scenario.fabric, ClosSpec) and scenario.fabric.host_count == 8
    if TRACES.is_dir():
        assert sorted(p.name for p in prefix.parent.glob(f"{prefix.name}.*.et")) == [
            f"{prefix.name}.{r}.et" for r in range(8)
        ]


def test_moe_mix_is_the_study_fabric() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    fabric = scenario.fabric
    assert (fabric.leaves, fabric.spines, fabric.hosts_per_leaf) == (2, 2, 8)
    assert fabric.host_link_gbps == 400.0
    assert fabric.parallel_links == 4  # 2 spines x 4 x 400G = the 8 x 400G below each leaf: 1:1
    assert workload_of(scenario).generate.ranks == 16
    assert scenario.transport.congestion_control == "dcqcn"


def test_reference_doc_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "scenario-reference.md").read_text()
    assert committed == render(), (
        "docs/scenario-reference.md is stale: python -m emulator.scenario.reference > "
        "docs/scenario-reference.md"
    )


def test_every_leaf_key_is_documented() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert len(rows) > 60
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[-1], f"undocumented key: {cells[0]}"


def test_workload_needs_exactly_one_source(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("workload: {iterations: 2}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:1: workload\.trace: a workload needs"):
        load_scenario(path)
    path.write_text("workload:\n  trace: x\n  generate: {kind: allreduce}\n")
    with pytest.raises(ScenarioError, match=r":3: workload\.generate: give either"):
        load_scenario(path)


def test_validate_cli_reports_bad_scenario_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("workload:\n  generate: {kind: moe_mix, ranks: 1}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert f"{path}:2: workload.generate.ranks: 1 must be at least 2" in err
