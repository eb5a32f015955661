"""The shipped scenarios load, and the generated scenario reference matches the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.cli import main
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.scenario.reference import render

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    assert scenario.source == path


def test_moe_mix_is_the_study_fabric() -> None:
    scenario = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    fabric = scenario.fabric
    assert (fabric.leaves, fabric.spines, fabric.hosts_per_leaf) == (2, 2, 8)
    assert fabric.host_link_gbps == 400.0
    assert fabric.parallel_links == 4  # 2 spines x 4 x 400G = the 8 x 400G below each leaf: 1:1
    assert scenario.workload.generate.ranks == 16
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
