"""Congestion management procedures: DCQCN convergence (section 7.3) and PFC behaviour under
incast (section 7.2), with RoCEv2 queue pairs under the scenario's transport."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.kpis import (
    RunData,
    drops_ppm,
    ecn_marking_ratio,
    fct_p99_us,
    goodput_gbps,
    jfi,
    pfc,
    retransmissions_per_s,
    windowed_rates,
)
from emulator.studies.bmwg.procedure import Procedure, capped

# bytes a RoCEv2 packet carries beyond its payload on the wire: BTH 12, ICRC 4, UDP 8, IPv4 20,
# Ethernet 14 and FCS 4, preamble and inter-frame gap 20 (IBTA annex A17; IEEE 802.3)
ROCE_WIRE_OVERHEAD_BYTES = 82


def payload_rate_bps(base: Base) -> float:
    """What one link delivers of RoCEv2 payload at the path MTU."""
    mtu = base.path_mtu_bytes
    return base.line_rate_bps * mtu / (mtu + ROCE_WIRE_OVERHEAD_BYTES)


def receiver_of(base: Base) -> int:
    return base.ranks - 1


def senders_for(base: Base, flows: int, skip: int = 0) -> tuple[list[int], int]:
    """(sending ranks, QPs each) for `flows` QPs into the receiver: as many ranks as divide
    them (at most all but the receiver), the ranks after the first `skip` of them."""
    room = base.ranks - 1
    count = min(flows, room)
    while flows % count:
        count -= 1
    others = [r for r in range(base.ranks) if r != receiver_of(base)]
    start = skip % room
    return [others[(start + i) % room] for i in range(count)], flows // count


class DcqcnConvergence(Procedure):
    name = "dcqcn-convergence"
    section = "7.3"
    title = "DCQCN convergence time"
    objective = (
        "M flows share one bottleneck (the receiver's link); at T0 M more start (2:1); the time "
        "from T0 until every one of the 2M flows delivers within the band around its fair share "
        "(the bottleneck's payload rate / 2M), its rate taken over a sliding window, and stays "
        "there until the traffic ends"
    )
    params = (
        Param("m", (4, 16, 64), "flows in each batch (the draft: 4, 16, 64, 256)"),
        Param("t0_us", 500.0, "when the second batch starts (target time)"),
        Param("trial_us", 3000.0, "when both batches stop posting"),
        Param("message_kb", 64, "each flow's messages (a rate sample at each one's end)"),
        Param("band_percent", 10.0, "the fair-share band (the draft: 10)"),
        Param("window_us", 100.0, "each flow's rate: its bytes delivered over this window"),
    )
    primary = "convergence_us"
    kpis = (
        ("convergence_us", "us"),
        ("converged", "share of repeats"),
        ("fair_share_gbps", "Gb/s"),
        ("jfi_end", ""),
        ("goodput_gbps", "Gb/s"),
        ("ecn_marking_ratio", ""),
        ("cnps", ""),
    )

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        out = []
        t0, end = params["t0_us"], params["trial_us"]
        for m in params["m"]:
            first, q1 = senders_for(base, m)
            second, q2 = senders_for(base, m, skip=len(first))
            common = {
                "kind": "incast",
                "receiver": receiver_of(base),
                "message_bytes": int(params["message_kb"]) * 1024,
                "rate_percent": 100.0,
                "rate_mode": "stateful",
                "messages_in_flight": 2,
            }
            traffic = [
                {**common, "name": "first", "senders": first, "qps": q1, "duration_us": end},
                {
                    **common,
                    "name": "second",
                    "senders": second,
                    "qps": q2,
                    "start_us": t0,
                    "duration_us": end - t0,
                },
            ]
            out.append(
                Trial(f"m{m}", {"M": m}, base.trial(f"bmwg-convergence-m{m}", traffic=traffic))
            )
        return out

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        m = int(trial.params["M"])
        t0, end = params["t0_us"] * 1e-6, params["trial_us"] * 1e-6
        fair = payload_rate_bps(base) / (2 * m)
        band = params["band_percent"] / 100
        window = params["window_us"] * 1e-6
        series = windowed_rates(run, t0, end, window)
        converged = convergence_s(series, t0, fair, band) if len(series) == 2 * m else None
        tail = end - 0.2 * (end - t0)
        means = [
            sum(r for _, r in late) / len(late)
            for late in ([(t, r) for t, r in v if t >= tail] for v in series.values())
            if late
        ]
        totals = run.summary.get("totals") or {}
        return {
            "convergence_us": None if converged is None else (converged - t0) * 1e6,
            "converged": converged is not None,
            "fair_share_gbps": fair / 1e9,
            "jfi_end": jfi(means) if len(means) == 2 * m else None,
            "goodput_gbps": goodput_gbps(run),
            "ecn_marking_ratio": ecn_marking_ratio(run),
            "cnps": totals.get("cnps"),
        }

    def anomalies(
        self, base: Base, params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        window = params["trial_us"] - params["t0_us"]
        return [
            f"M = {r['M']}: in {1 - r['converged']:.0%} of the repeats the 2M flows were not all "
            f"within the band by the end of the trial ({window:g} us after T0; a longer --param "
            "trial_us may see it); convergence_us is the mean of those that were"
            for r in rows
            if r.get("converged") is not None and r["converged"] < 1
        ]

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        out = super().deviations(base, params, repeats)
        if 256 not in params["m"]:
            out.append("M = 256 not run (--param m=...,256 runs it)")
        out.append(
            "the fair-share band is held from the convergence time to the end of the trial, "
            "each flow's rate over a sliding window (the draft does not say how long, or how "
            "rates are sampled)"
        )
        return out


def convergence_s(
    series: Mapping[Any, Sequence[tuple[float, float]]], t0: float, fair: float, band: float
) -> float | None:
    """The first time from which every flow's rate samples lie within `band` of `fair` and
    each flow has one at least (None: never, within the samples given)."""
    low, high = fair * (1 - band), fair * (1 + band)
    last_out = t0
    for samples in series.values():
        for t, rate in samples:
            if t >= t0 and not low <= rate <= high:
                last_out = max(last_out, t)
    for samples in series.values():
        if not any(t > last_out for t, _ in samples):
            return None
    return last_out


class PfcIncast(Procedure):
    name = "pfc-incast"
    section = "7.2"
    title = "PFC behaviour under incast"
    objective = (
        "N senders at 100% of line rate into one receiver: pause frames per second and paused "
        "time at the switch ports, end-to-end goodput, marking, drops and resends"
    )
    params = (
        Param("n", (2, 4, 8, 16, 32, 64), "incast ratios N:1 (the draft: 2 to 64)"),
        Param("duration_us", 1000.0, "how long the senders post messages (target time)"),
        Param("message_kb", 256, "message size"),
    )
    primary = "goodput_gbps"
    kpis = (
        ("goodput_gbps", "Gb/s"),
        ("jfi_senders", ""),
        ("pfc_events_per_s", "1/s"),
        ("pfc_paused_us", "us"),
        ("ecn_marking_ratio", ""),
        ("drops_ppm", "ppm"),
        ("retx_per_s", "1/s"),
        ("fct_p99_us", "us"),
    )

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        out = []
        for n in capped(params["n"], base.ranks - 1, "incast ratios", []):
            senders, _ = senders_for(base, n)
            traffic = [
                {
                    "name": "incast",
                    "kind": "incast",
                    "senders": senders[:n],
                    "receiver": receiver_of(base),
                    "message_bytes": int(params["message_kb"]) * 1024,
                    "duration_us": params["duration_us"],
                    "rate_percent": 100.0,
                    "rate_mode": "stateful",
                }
            ]
            out.append(Trial(f"n{n}", {"N": n}, base.trial(f"bmwg-incast-n{n}", traffic=traffic)))
        return out

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        by_sender: dict[int, float] = {}
        for f in run.flows:
            if f.get("end_s") is not None:
                by_sender[f["src_rank"]] = by_sender.get(f["src_rank"], 0.0) + f["bytes"]
        events, paused = pfc(run)
        return {
            "goodput_gbps": goodput_gbps(run),
            "jfi_senders": jfi(list(by_sender.values())),
            "pfc_events_per_s": events,
            "pfc_paused_us": paused,
            "ecn_marking_ratio": ecn_marking_ratio(run),
            "drops_ppm": drops_ppm(run),
            "retx_per_s": retransmissions_per_s(run),
            "fct_p99_us": fct_p99_us(run),
        }

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        out = super().deviations(base, params, repeats)
        capped(params["n"], base.ranks - 1, "incast ratios", out)
        return out
