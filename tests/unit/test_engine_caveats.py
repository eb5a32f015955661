"""The engine backends warn when the NIC's multi-packet transmit turns meet a fabric or transport
that spreads every packet (emulator/backends/engine/caveats.py); the simulator does not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from emulator.backends import BACKENDS
from emulator.backends.engine.caveats import transmit_turn_caveats
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario

ROOT = Path(__file__).resolve().parents[2]


def main_job(
    *,
    leaf: str = "ecmp",
    granularity: str = "packet",
    quantum: int = 32768,
    entropy: str = "per_qp",
) -> Scenario:
    scenario = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    fabric = scenario.fabric
    balancing = dataclasses.replace(
        fabric.leaf.load_balancing, mode=leaf, adaptive_granularity=granularity
    )
    return dataclasses.replace(
        scenario,
        fabric=dataclasses.replace(
            fabric, leaf=dataclasses.replace(fabric.leaf, load_balancing=balancing)
        ),
        engine=dataclasses.replace(scenario.engine, nic_quantum_bytes=quantum),
        transport=dataclasses.replace(scenario.transport, entropy=entropy),
    )


def test_spreading_with_turns_is_said_with_the_key_that_fixes_it() -> None:
    for scenario, named in (
        (main_job(leaf="spray"), "fabric.leaf.load_balancing.mode spray"),
        (main_job(leaf="adaptive"), "fabric.leaf.load_balancing.mode adaptive"),
        (main_job(entropy="per_packet"), "transport.entropy per_packet"),
    ):
        (warning,) = transmit_turn_caveats(scenario)
        assert warning.startswith(named) and "engine.nic_quantum_bytes: 0" in warning


def test_nothing_said_where_turns_do_not_spread() -> None:
    assert transmit_turn_caveats(main_job()) == []  # ECMP keeps a queue pair on one path
    assert transmit_turn_caveats(main_job(leaf="flowlet")) == []  # a flowlet moves whole
    assert transmit_turn_caveats(main_job(leaf="adaptive", granularity="flowlet")) == []
    # packet by packet (0, or a turn of one packet): nothing leaves back to back
    assert transmit_turn_caveats(main_job(leaf="spray", quantum=0)) == []
    assert transmit_turn_caveats(main_job(leaf="spray", quantum=4096)) == []


def test_engine_backends_say_it_and_the_simulators_do_not() -> None:
    sprayed = main_job(leaf="spray")
    for name in ("netns", "dut", "cluster", "mininet"):
        assert BACKENDS[name]().warnings(sprayed), name
    for name in ("sim", "flow"):
        assert BACKENDS[name]().warnings(sprayed) == [], name
