"""The run page's "Load balancing and reordering" section: per tier group the spread of the
link loads (MMR and JFI, collectors.balance) and what the receivers saw of reordering
(collectors.reordering). Shown only for a run that spreads packets (a non-ECMP tier, per-packet
entropy, selective reliability) or that saw any packet reordered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.pages.kit import facts, number, section, table
from collectors.reordering import shows_multipath

GROUP_LABELS = {
    "leaf_up": "leaf uplinks (leaf to spine)",
    "spine_down": "spine downlinks (spine to leaf)",
    "spine_up": "spine uplinks (spine to super spine)",
    "super_spine_down": "super-spine downlinks (super spine to spine)",
}
# (header, key, scale, format) of the group table
GROUP_COLUMNS: tuple[tuple[str, str, float, str], ...] = (
    ("links", "links", 1.0, "{:.0f}"),
    ("MB carried", "bytes", 1e-6, "{:.1f}"),
    ("MMR", "mmr", 1.0, "{:.3f}"),
    ("JFI", "jfi", 1.0, "{:.3f}"),
    ("MMR p50 over time", "mmr_p50_over_time", 1.0, "{:.3f}"),
    ("MMR max over time", "mmr_max_over_time", 1.0, "{:.3f}"),
    ("JFI p50 over time", "jfi_p50_over_time", 1.0, "{:.3f}"),
    ("JFI min over time", "jfi_min_over_time", 1.0, "{:.3f}"),
    ("intervals", "intervals", 1.0, "{:.0f}"),
)
NOTE = (
    "<p>MMR: the largest link load over the mean of the group's links (1: even; n: one of n "
    "links carried it all), as the IETF BMWG AI-fabric benchmark judges spraying and flowlets "
    "(draft-calabria-bmwg-ai-fabric-training-bench). JFI: Jain's fairness index, "
    "(&sum;x)<sup>2</sup> / (n &sum;x<sup>2</sup>) (Jain, Chiu and Hawe 1984; 1: even, 1/n: one "
    "link). Over the run, a link that carried nothing counts 0; over time, per sampling interval "
    "in which the group carried anything (medians nearest-rank). A packet is reordered when it "
    "arrives after one with a higher PSN (RFC 4737); its extent is how far below.</p>"
)


def setup_text(reordering: Mapping[str, Any]) -> str:
    """The run's multipath setup in words ("-" where the scenario is unknown)."""
    tiers = reordering.get("load_balancing")
    modes = ", ".join(f"{tier} {mode}" for tier, mode in (tiers or {}).items())
    return (
        f"reliability {reordering.get('reliability') or '-'}, "
        f"entropy {reordering.get('entropy') or '-'}, load balancing {modes or '-'}"
    )


def _share(part: Any, whole: Any) -> str:
    if not isinstance(part, int | float) or not isinstance(whole, int | float) or not whole:
        return number(part, "{:.0f}")
    return f"{part:.0f} ({part / whole:.2%})"


def multipath_section(summary: Mapping[str, Any]) -> str:
    """The section, or "" for a run that neither spreads packets nor saw any reordered."""
    if not shows_multipath(summary):
        return ""
    reordering: Mapping[str, Any] = summary.get("reordering") or {}
    groups: Mapping[str, Mapping[str, Any]] = summary.get("load_balance") or {}
    rows = [
        [GROUP_LABELS.get(name, name), *(number(g.get(k), f, s) for _, k, s, f in GROUP_COLUMNS)]
        for name, g in groups.items()
    ]
    received = reordering.get("data_packets_received")
    counts = facts(
        [
            ("setup", setup_text(reordering)),
            ("data packets received", number(received, "{:.0f}")),
            ("reordered", _share(reordering.get("reordered_packets"), received)),
            ("reorder extent mean", number(reordering.get("reorder_extent_mean"), "{:.2f}")),
            ("reorder extent max", number(reordering.get("reorder_extent_max"), "{:.0f}")),
            ("held out of order", number(reordering.get("held_out_of_order"), "{:.0f}")),
            ("SACKs sent", number(reordering.get("sacks_sent"), "{:.0f}")),
            ("retransmitted", number(reordering.get("retransmitted_packets"), "{:.0f}")),
            ("NAKs sent", number(reordering.get("naks_sent"), "{:.0f}")),
        ]
    )
    headers = ["tier group", *(h for h, *_ in GROUP_COLUMNS)]
    return section("Load balancing and reordering", table(headers, rows), counts, NOTE)
