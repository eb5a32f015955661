"""summary.json `reordering`: how the run was set up to spread packets (the transport's
reliability and entropy, each switch tier's load balancing) and what the receivers saw of it.

Counts are the tester's per-QP counters (queue_pairs.parquet) summed over the queue pairs; a
packet is reordered when it arrives after one with a higher PSN (RFC 4737, section 3), and its
extent is how far below the highest PSN seen it was (RFC 4737, section 4.2). The setup comes
from the scenario (the results folder's scenario.yaml, read once by the writer) and is carried
over from an existing summary.json when `emulate report` recomputes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from emulator.transport.params import TransportParams

# fabrics.spec.LoadBalancingSpec.mode's default (the collectors do not import the fabrics; a
# test holds the two equal)
DEFAULT_LOAD_BALANCING = "ecmp"

# queue_pairs.parquet column -> summary.json key (summed over the queue pairs)
_SUMMED = {
    "data_packets_received": "data_packets_received",
    "reordered_packets": "reordered_packets",
    "held_out_of_order": "held_out_of_order",
    "sacks_sent": "sacks_sent",
    "packets_retransmitted": "retransmitted_packets",
    "naks_sent": "naks_sent",
}


@dataclass(frozen=True)
class MultipathSetup:
    """What a run asked of multipath: transport.reliability, transport.entropy, and per switch
    tier of the fabric its load_balancing.mode (no tiers: a DUT)."""

    reliability: str
    entropy: str
    load_balancing: Mapping[str, str] = field(default_factory=dict)

    @property
    def multipath(self) -> bool:
        """Whether packets of one queue pair may take several paths (and so arrive reordered)."""
        return (
            self.reliability != "go_back_n"
            or self.entropy != "per_qp"
            or any(mode != "ecmp" for mode in self.load_balancing.values())
        )

    @classmethod
    def of_scenario_text(cls, text: str | None) -> MultipathSetup | None:
        """From the scenario YAML the results folder keeps (None when it is not a mapping: a
        probe's placeholder). Read as plain YAML, not through the scenario model, which sits
        above the collectors; a key left out takes the model's default (the run loaded and
        checked the same text before it started)."""
        try:
            doc = yaml.safe_load(text or "")
        except yaml.YAMLError:
            return None
        if not isinstance(doc, Mapping):
            return None
        transport = _mapping(doc.get("transport"))
        defaults = TransportParams()
        fabric = _mapping(doc.get("fabric"))
        modes: dict[str, str] = {}
        if fabric.get("kind", "clos") == "clos":  # a DUT's tiers are not ours
            tiers = ("leaf", "spine", *(("super_spine",) if fabric.get("super_spines") else ()))
            modes = {tier: _mode(fabric, tier) for tier in tiers}
        return cls(
            str(transport.get("reliability", defaults.reliability)),
            str(transport.get("entropy", defaults.entropy)),
            modes,
        )

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any]) -> MultipathSetup | None:
        """From an existing summary.json's `reordering` (None when it has none)."""
        section = summary.get("reordering")
        if not isinstance(section, Mapping) or section.get("reliability") is None:
            return None
        return cls(
            str(section["reliability"]),
            str(section.get("entropy") or "per_qp"),
            dict(section.get("load_balancing") or {}),
        )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _mode(fabric: Mapping[str, Any], tier: str) -> str:
    """fabric.<tier>.load_balancing.mode of a scenario's YAML, or its default."""
    balancing = _mapping(_mapping(fabric.get(tier)).get("load_balancing"))
    return str(balancing.get("mode", DEFAULT_LOAD_BALANCING))


def reordering_summary(queue_pairs: pa.Table, setup: MultipathSetup | None) -> dict[str, Any]:
    """summary.json `reordering`; the counts are None without queue pairs (not measured) and the
    setup's keys None when the run's scenario is unknown."""
    measured = queue_pairs.num_rows > 0

    def summed(name: str) -> int | None:
        return int(pc.sum(queue_pairs.column(name)).as_py() or 0) if measured else None

    counts = {key: summed(name) for name, key in _SUMMED.items()}
    received, reordered = counts["data_packets_received"], counts["reordered_packets"]
    extent_sum = summed("reorder_extent_sum")
    extent_max = pc.max(queue_pairs.column("reorder_extent_max")).as_py() if measured else None
    return {
        "reliability": setup.reliability if setup else None,
        "entropy": setup.entropy if setup else None,
        "load_balancing": dict(setup.load_balancing) if setup else None,
        "data_packets_received": received,
        "reordered_packets": reordered,
        "reordered_share": reordered / received if received and reordered is not None else None,
        "reorder_extent_mean": extent_sum / reordered
        if reordered and extent_sum is not None
        else None,
        "reorder_extent_max": extent_max,
        "held_out_of_order": counts["held_out_of_order"],
        "sacks_sent": counts["sacks_sent"],
        "retransmitted_packets": counts["retransmitted_packets"],
        "naks_sent": counts["naks_sent"],
    }


def shows_multipath(summary: Mapping[str, Any]) -> bool:
    """Whether a report shows load balancing and reordering: a non-ECMP tier, per-packet
    entropy, selective reliability, or any reordered packets."""
    section = summary.get("reordering")
    if not isinstance(section, Mapping):
        return False
    setup = MultipathSetup.of_summary(summary)
    return (setup is not None and setup.multipath) or bool(section.get("reordered_packets"))
