"""The study's conditions: each a way of balancing the fabric and a transport to go with it, and
the scenario override that makes a condition of the user's scenario.

A condition sets fabric.<tier>.load_balancing.mode on every switch tier that has a choice of
next hops (ClosSpec.equal_cost_next_hops(tier) >= 2) and ecmp on the others (a tier without a
choice cannot take another mode), keeping the scenario's spray_order, flowlet_gap_us and
adaptive_granularity; and transport.reliability and transport.entropy. Everything else is the
scenario's, collectives.sport_policy included (the ECMP baseline is the scenario's own hashing).
The overrides are replaced fields of the loaded scenario, as the sensitivity study changes its
link rates: the run pipeline writes them into each run's scenario copy
(emulator.run.pipeline.scenario_text), which is how a reused run's condition is read back
(condition_of).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from emulator.errors import InputError

if TYPE_CHECKING:
    from emulator.scenario.model import Scenario
    from fabrics.spec import ClosSpec, TierSpec

Reliability = Literal["go_back_n", "selective"]
Entropy = Literal["per_qp", "per_packet"]
Mode = Literal["ecmp", "spray", "flowlet", "adaptive"]


@dataclass(frozen=True)
class Condition:
    """One condition of the study: how the balancing tiers choose a next hop, and the transport."""

    name: str  # as --conditions and the run folders say it
    mode: Mode
    reliability: Reliability
    entropy: Entropy = "per_qp"
    about: str = ""

    @property
    def reorders(self) -> bool:
        """Whether the condition may deliver a queue pair's packets out of order: its paths
        change within a flow (any mode but ECMP, or ECMP hashing a port that changes)."""
        return self.mode != "ecmp" or self.entropy == "per_packet"

    @property
    def label(self) -> str:
        entropy = "" if self.entropy == "per_qp" else f" + {self.entropy} entropy"
        return f"{self.mode}{entropy} + {self.reliability}"

    def describe(self) -> dict[str, str]:
        return {
            "load_balancing": self.mode,
            "reliability": self.reliability,
            "entropy": self.entropy,
            "about": self.about,
        }


BASELINE = "ecmp-gbn"

# Condition name -> condition, in the order of the runs and of every table.
CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition(BASELINE, "ecmp", "go_back_n", about="the baseline: hashing, in-order RC"),
        Condition("spray-gbn", "spray", "go_back_n", about="every packet its own path, RC"),
        Condition("spray-sel", "spray", "selective", about="sprayed, selective repeat"),
        Condition("flowlet-gbn", "flowlet", "go_back_n", about="a new path after an idle gap"),
        Condition("flowlet-sel", "flowlet", "selective", about="flowlets, selective repeat"),
        Condition("adaptive-sel", "adaptive", "selective", about="the least-queued next hop"),
        Condition(
            "entropy-sel",
            "ecmp",
            "selective",
            "per_packet",
            about="hashing switches, a source port per packet",
        ),
    )
}


def parse_conditions(text: str | None) -> tuple[Condition, ...]:
    """--conditions a,b,c (None: every condition), in the registry's order,
    the baseline added when not given (every comparison is against it)."""
    if text is None:
        return tuple(CONDITIONS.values())
    names = [item.strip() for item in text.split(",")]
    for name in names:
        if not name:
            raise InputError(f"--conditions {text}: an empty name (give names separated by commas)")
        if name not in CONDITIONS:
            known = ", ".join(CONDITIONS)
            raise InputError(f"--conditions {text}: unknown condition {name!r} (known: {known})")
        if names.count(name) > 1:
            raise InputError(f"--conditions {text}: {name} is given twice")
    return tuple(c for c in CONDITIONS.values() if c.name in names or c.name == BASELINE)


def balancing_tiers(fabric: ClosSpec) -> tuple[str, ...]:
    """The switch tiers with a choice of next hops: those a condition's mode is applied to."""
    return tuple(tier for tier in fabric.tiers if fabric.equal_cost_next_hops(tier) >= 2)


def clos_of(scenario: Scenario, where: Path | str) -> ClosSpec:
    """The scenario's Clos, refusing a fabric the study cannot balance, in one line."""
    from fabrics.spec import ClosSpec, kind_of

    fabric = scenario.fabric
    if not isinstance(fabric, ClosSpec):
        raise InputError(
            f"{where}: fabric.kind {kind_of(fabric)}: the load-balancing study sets the load "
            "balancing of a clos fabric's switch tiers; a dut balances as the device does"
        )
    if not balancing_tiers(fabric):
        raise InputError(
            f"{where}: fabric: no switch tier has a choice of next hops (leaf, spine and "
            "super_spine each have at most one toward every destination), so there is nothing "
            "to balance; give the fabric 2 or more spines or parallel_links"
        )
    return fabric


def variant(scenario: Scenario, condition: Condition, where: Path | str) -> Scenario:
    """The scenario under a condition (module docstring), named <scenario>-<condition>."""
    fabric = clos_of(scenario, where)
    tiers = balancing_tiers(fabric)

    def balanced(name: str, tier: TierSpec) -> TierSpec:
        mode = condition.mode if name in tiers else "ecmp"
        return dataclasses.replace(
            tier, load_balancing=dataclasses.replace(tier.load_balancing, mode=mode)
        )

    try:
        transport = dataclasses.replace(
            scenario.transport, reliability=condition.reliability, entropy=condition.entropy
        )
    except ValueError as exc:  # e.g. a window larger than a SACK's bitmap
        raise InputError(f"{where}: condition {condition.name}: transport.{exc}") from None
    return dataclasses.replace(
        scenario,
        name=f"{scenario.name}-{condition.name}",
        fabric=dataclasses.replace(
            fabric,
            leaf=balanced("leaf", fabric.leaf),
            spine=balanced("spine", fabric.spine),
            super_spine=balanced("super_spine", fabric.super_spine),
        ),
        transport=transport,
    )


def condition_of(scenario: Scenario, where: Path | str) -> Condition:
    """The condition a run's scenario copy ran under (a reused run), or InputError saying why
    it is none of them."""
    fabric = clos_of(scenario, where)
    tiers = balancing_tiers(fabric)
    modes = {fabric.tiers[t].load_balancing.mode for t in tiers}
    transport = scenario.transport
    for condition in CONDITIONS.values():
        if modes == {condition.mode} and (
            transport.reliability,
            transport.entropy,
        ) == (condition.reliability, condition.entropy):
            return condition
    said = ", ".join(f"{t} {fabric.tiers[t].load_balancing.mode}" for t in tiers)
    raise InputError(
        f"{where}: load balancing {said} with transport.reliability {transport.reliability} and "
        f"transport.entropy {transport.entropy} is none of the study's conditions "
        f"({', '.join(CONDITIONS)})"
    )
