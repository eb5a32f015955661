"""scenarios/switch_tests/: each case loads, plans, states its expectations, and the DUT cases
are the four-port lab layout (only interface names and addresses to change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.scenario import load_scenario
from fabrics.spec import ClosSpec, DutSpec

CASES = sorted((Path(__file__).resolve().parents[2] / "scenarios" / "switch_tests").glob("*.yaml"))


def test_the_test_plan_cases_are_shipped() -> None:
    assert {p.stem for p in CASES} == {
        "basic_dataplane",
        "incast_dcqcn",
        "incast_no_dcqcn",
        "qp_fairness",
        "ecmp_spread_1qp",
        "ecmp_spread_xqp",
        "pfc_generation",
        "spray_1qp",
        "entropy_1qp",
        "flowlet_1qp",
        "ars_adaptive",
    }


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case_loads_plans_and_states_expectations(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem and scenario.workload is None and scenario.traffic
    assert scenario.expect, "a switch test states its expected results"
    assert main(["plan", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["flows_total"] > 0 and document["ideal_job_time_s"] > 0
    fabric = scenario.fabric
    if isinstance(fabric, DutSpec):
        assert len(fabric.interfaces) == 4 and scenario.run.time_dilation == 1
        assert all(e.check != "uplink_spread" for e in scenario.expect)
    else:
        assert isinstance(fabric, ClosSpec) and fabric.spines == 4
        assert any(e.check == "uplink_spread" for e in scenario.expect)
    # the PFC-dependent results are marked so, or are PFC checks by nature
    for e in scenario.expect:
        if e.check == "pfc_frames_received":
            assert e.needs_pfc
