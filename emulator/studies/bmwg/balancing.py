"""Load-balancing procedures (section 8): ECMP entropy with 1 to 32 QPs per pair (8.1), flowlets
with a gap-timer sweep (8.2), packet spraying (8.3); each judged by the links' MMR and JFI
(8.4), out-of-order and retransmission rates, and goodput against ECMP's.

The traffic: every host sends to the host at the same position under the next leaf (a
permutation across the spines), Q queue pairs per pair, a fixed amount per pair."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.kpis import (
    RunData,
    goodput_gbps,
    link_balance,
    out_of_order_per_s,
    retransmissions_per_s,
)
from emulator.studies.bmwg.procedure import Procedure


def balancing_tiers(base: Base) -> tuple[str, ...]:
    """The tiers with a choice of next hops: leaves toward the spines; spines only with
    parallel links or super spines above them."""
    fabric = base.document.get("fabric") or {}
    spine = int(fabric.get("parallel_links", 1)) > 1 or base.super_spines > 0
    return ("leaf", "spine") if spine else ("leaf",)


def cross_pairs(base: Base) -> list[list[int]]:
    """Each rank to the rank at its position under the next leaf (toward a switch under test:
    to the rank half the ports away)."""
    if base.dut or not base.hosts_per_leaf:
        half = base.ranks // 2
        return [[r, (r + half) % base.ranks] for r in range(base.ranks) if half]
    return [[r, (r + base.hosts_per_leaf) % base.ranks] for r in range(base.ranks)]


def pairs_trial(
    base: Base,
    name: str,
    params_shown: Mapping[str, Any],
    qps: int,
    bytes_per_pair: int,
    *,
    mode: Mapping[str, Any] | None = None,
    transport: Mapping[str, Any] | None = None,
) -> Trial:
    traffic = [
        {
            "name": "pairs",
            "kind": "pairs",
            "pairs": cross_pairs(base),
            "qps": qps,
            "bytes_per_pair": bytes_per_pair,
            # four messages per QP: each QP's share, sent as a tester's stream of messages
            "message_bytes": max(1, bytes_per_pair // (4 * qps)),
            "rate_percent": 100.0,
            "rate_mode": "stateful",
        }
    ]
    fabric = None
    if mode is not None and not base.dut:
        fabric = {tier: {"load_balancing": dict(mode)} for tier in balancing_tiers(base)}
    return Trial(
        name,
        params_shown,
        base.trial(f"bmwg-{name}", traffic=traffic, fabric=fabric, transport=transport),
    )


class Balancing(Procedure):
    """The load-balancing procedures' shared KPIs and table."""

    # a run whose only flag is its resends is judged (spraying under go-back-N resends by
    # design: what the procedure measures), with the flag shown
    waive_resends = True

    primary = "mmr_leaf_up"
    kpis = (
        ("mmr_leaf_up", ""),
        ("jfi_leaf_up", ""),
        ("mmr_spine_down", ""),
        ("goodput_gbps", "Gb/s"),
        ("goodput_vs_ecmp_percent", "%"),
        ("ooo_per_s", "1/s"),
        ("retx_per_s", "1/s"),
        ("jct_us", "us"),
    )

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        up_mmr, up_jfi = link_balance(run, "leaf_up")
        down_mmr, _ = link_balance(run, "spine_down")
        job = run.summary.get("job_time_s")
        return {
            "mmr_leaf_up": up_mmr,
            "jfi_leaf_up": up_jfi,
            "mmr_spine_down": down_mmr,
            "goodput_gbps": goodput_gbps(run),
            "ooo_per_s": out_of_order_per_s(run),
            "retx_per_s": retransmissions_per_s(run),
            "jct_us": None if job is None else job * 1e6,
        }

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        rows = super().rows(base, params, done)
        ecmp = next((r["goodput_gbps"] for r in rows if r["trial"] == "ecmp"), None)
        for row in rows:
            gain = None
            if ecmp and row["goodput_gbps"] is not None:
                gain = (row["goodput_gbps"] / ecmp - 1) * 100
            row["goodput_vs_ecmp_percent"] = gain
        return rows


class EcmpEntropy(Balancing):
    name = "ecmp-entropy"
    section = "8.1"
    title = "ECMP entropy and polarization"
    objective = (
        "5-tuple ECMP at every tier; Q queue pairs per host pair, each its own UDP source port: "
        "how evenly the uplinks carry the load as Q grows"
    )
    params = (
        Param("qps", (1, 4, 8, 16, 32), "queue pairs per pair (the draft: 1, 4, 8, 16, 32)"),
        Param("bytes_per_pair_kb", 8192, "what each pair sends"),
    )

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        size = int(params["bytes_per_pair_kb"]) * 1024
        ecmp = {"mode": "ecmp"}
        return [pairs_trial(base, f"q{q}", {"QPs": q}, q, size, mode=ecmp) for q in params["qps"]]

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        rows = Procedure.rows(self, base, params, done)
        for row in rows:
            row["goodput_vs_ecmp_percent"] = None
        return rows

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        out = super().deviations(base, params, repeats)
        if not base.dut:
            out.append(
                f"one fabric size ({base.leaves} leaves; the draft: 8, 16, 32, 64) and no "
                "BTH-aware hashing (the fabric hashes the 5-tuple)"
            )
        return out


class Flowlet(Balancing):
    name = "flowlet"
    section = "8.2"
    title = "Dynamic load balancing (flowlets)"
    objective = (
        "flowlet switching at every tier with 4 QPs per pair, the gap timer swept, beside ECMP: "
        "MMR, JFI, out-of-order rate and goodput against ECMP's"
    )
    params = (
        Param("gaps_us", (0.5, 1.0, 2.0), "flowlet gap timers (the terminology's 500 ns to 2 us)"),
        Param("qps", 4, "queue pairs per pair (the draft: 4)"),
        Param("bytes_per_pair_kb", 8192, "what each pair sends"),
    )
    on_dut = False

    def dut_reason(self) -> str:
        return "the switch balances: set its DLB mode and run ecmp-entropy with --param qps=4"

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        q, size = int(params["qps"]), int(params["bytes_per_pair_kb"]) * 1024
        out = [pairs_trial(base, "ecmp", {"mode": "ecmp"}, q, size, mode={"mode": "ecmp"})]
        for gap in params["gaps_us"]:
            mode = {"mode": "flowlet", "flowlet_gap_us": gap}
            out.append(
                pairs_trial(
                    base, f"flowlet-{gap:g}us", {"mode": f"flowlet {gap:g} us"}, q, size, mode=mode
                )
            )
        return out


class PacketSpray(Balancing):
    name = "packet-spray"
    section = "8.3"
    title = "Packet spraying"
    objective = (
        "per-packet spraying at every tier beside ECMP, with each reliability (go-back-N resends "
        "on reordering; selective repeat tolerates it): MMR and JFI near 1, the out-of-order "
        "rate and the resends it costs"
    )
    params = (
        Param("qps", 4, "queue pairs per pair"),
        Param(
            "reliability", ("selective", "go_back_n"), "transport.reliability of the sprayed runs"
        ),
        Param("bytes_per_pair_kb", 8192, "what each pair sends"),
    )
    on_dut = False

    def dut_reason(self) -> str:
        return "the switch sprays: set its mode and run ecmp-entropy with --param qps=4"

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        q, size = int(params["qps"]), int(params["bytes_per_pair_kb"]) * 1024
        out = [pairs_trial(base, "ecmp", {"mode": "ecmp"}, q, size, mode={"mode": "ecmp"})]
        for reliability in params["reliability"]:
            out.append(
                pairs_trial(
                    base,
                    f"spray-{reliability}",
                    {"mode": f"spray, {reliability}"},
                    q,
                    size,
                    mode={"mode": "spray"},
                    transport={"reliability": reliability},
                )
            )
        return out

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        return [
            *super().deviations(base, params, repeats),
            "no in-fabric reorder buffer: the receivers see every reordering (appendix C)",
        ]
