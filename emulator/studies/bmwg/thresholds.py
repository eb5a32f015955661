"""Procedures with stateless streams (a tester's frames at a fixed rate, no congestion control):
back-to-back burst absorption under incast (section 5.3) and ECN marking accuracy at a
threshold (section 7.1)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.congestion import receiver_of, senders_for
from emulator.studies.bmwg.kpis import RunData
from emulator.studies.bmwg.procedure import Procedure, capped

ECT0 = 2  # RFC 3168


class BurstAbsorption(Procedure):
    name = "burst-absorption"
    section = "5.3"
    title = "Back-to-back burst absorption under incast"
    objective = (
        "N senders each send a burst of B frames at line rate at once into one receiver; the "
        "largest B no repeat loses a frame of, found by doubling and then halving the interval"
    )
    params = (
        Param("n", (2, 4, 8, 16, 32), "incast ratios N:1 (the draft: 2 to 32)"),
        Param("frame_bytes", 1024, "frame size, FCS included"),
        Param("start_frames", 16, "the first burst length tried"),
        Param("max_frames", 4096, "the longest burst tried (a capacity at it: no loss up to it)"),
    )
    # the draft's: at least 50 repeats per burst length (a deterministic simulation gains
    # nothing from them: --repeats 1 there, listed as a departure)
    repeats = 50
    draft_repeats = 50
    primary = "frames_lost"
    kpis = (("frames_lost", ""), ("loss_ppm", "ppm"), ("latency_max_us", "us"))
    on_dut = True

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        out = []
        for n in capped(params["n"], base.ranks - 1, "incast ratios", []):
            burst = next_burst(search_state(done, n), params)
            if burst is not None:
                out.append(self._trial(base, params, n, burst))
        return out

    def _trial(self, base: Base, params: Mapping[str, Any], n: int, burst: int) -> Trial:
        senders, _ = senders_for(base, n)
        dscp = int((base.document.get("transport") or {}).get("dscp", 26))
        streams = [
            {
                "name": f"burst{i}",
                "src": src,
                "dst": receiver_of(base),
                "frame_bytes": params["frame_bytes"],
                "dscp": dscp,
                "ecn": ECT0,
                "udp_sport": 40000 + i,
                "rate_percent": 100.0,
                "packets": burst,
            }
            for i, src in enumerate(senders[:n])
        ]
        return Trial(
            f"n{n}-b{burst}",
            {"N": n, "burst_frames": burst},
            base.trial(f"bmwg-burst-n{n}-b{burst}", streams=streams),
        )

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        streams = run.summary.get("streams") or []
        tx = sum(s["frames_tx"] for s in streams)
        lost = sum(s["frames_lost"] for s in streams)
        latency = [s["latency_ns"]["max"] for s in streams if s["latency_ns"]["max"] is not None]
        return {
            "frames_lost": lost,
            "loss_ppm": lost / tx * 1e6 if tx else None,
            "latency_max_us": max(latency) / 1e3 if latency else None,
        }

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        """One row per incast ratio: the capacity the search found, in frames and bytes per
        sender, and the bursts it ran."""
        out = []
        for n in capped(params["n"], base.ranks - 1, "incast ratios", []):
            state = search_state(done, n)
            lossless, lossy, flagged = state
            out.append(
                {
                    "trial": f"n{n}",
                    "N": n,
                    "capacity_frames": lossless,
                    "capacity_bytes": lossless * params["frame_bytes"],
                    "first_loss_frames": lossy,
                    "bursts_tried": sorted(
                        {
                            int(r.trial.params["burst_frames"])
                            for r in done
                            if r.trial.params["N"] == n
                        }
                    ),
                    "repeats": sum(1 for r in done if r.trial.params["N"] == n),
                    "judged": sum(1 for r in done if r.trial.params["N"] == n and r.judged),
                    "stopped_by": flagged,
                    "primary_cv": None,
                }
            )
        return out

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        out = super().deviations(base, params, repeats)
        capped(params["n"], base.ranks - 1, "incast ratios", out)
        out.append("one frame size (the draft's message-size list for this test is not specified)")
        return out


def search_state(done: Sequence[TrialRun], n: int) -> tuple[int, int | None, str | None]:
    """(longest burst no repeat lost a frame of, shortest one a repeat lost one of, why the
    search stopped early: a flagged run's reason) for incast ratio `n`."""
    by_burst: dict[int, list[TrialRun]] = {}
    for r in done:
        if r.trial.params["N"] == n:
            by_burst.setdefault(int(r.trial.params["burst_frames"]), []).append(r)
    lossless, lossy, flagged = 0, None, None
    for burst, runs in sorted(by_burst.items()):
        bad = [r for r in runs if not r.judged]
        if bad:
            flagged = f"burst {burst}: {'; '.join(bad[0].run.reasons[:2]) or 'partial'}"
            continue
        if any(r.kpis.get("frames_lost") for r in runs):
            lossy = burst if lossy is None else min(lossy, burst)
        else:
            lossless = max(lossless, burst)
    return lossless, lossy, flagged


def next_burst(state: tuple[int, int | None, str | None], params: Mapping[str, Any]) -> int | None:
    """Doubling from start_frames until a loss (or max_frames), then bisection down to a 3%
    interval; None when done."""
    lossless, lossy, flagged = state
    if flagged is not None:
        return None  # the machine, not the fabric, decided a run: stop there (an anomaly)
    top = int(params["max_frames"])
    if lossy is None:
        if lossless >= top:
            return None
        return min(top, max(int(params["start_frames"]), 2 * lossless))
    if lossy - lossless <= max(1, lossless // 32):
        return None
    return (lossless + lossy) // 2


class EcnMarking(Procedure):
    name = "ecn-marking"
    section = "7.1"
    title = "ECN marking accuracy and threshold"
    objective = (
        "two streams of ECT frames overload the receiver's link so its queue grows steadily "
        "through the marking thresholds (Kmin = T, Kmax = 2T); the share of frames marked "
        "against the queue depth they found"
    )
    params = (
        Param("thresholds_kb", (100, 1000, 5000), "T, Kmin (the draft: about 100 KB, 1 MB, 5 MB)"),
        Param("overload_percent", 20.0, "what the two streams offer beyond line rate"),
        Param("frame_bytes", 1024, "frame size, FCS included"),
    )
    primary = "onset_bytes"
    kpis = (
        ("onset_bytes", "B"),  # to a tenth of T
        ("deviation_percent", "%"),
        ("marked_below_kmin", ""),
        ("marked_above_kmax", ""),
        ("max_queue_bytes", "B"),
    )
    on_dut = False

    def dut_reason(self) -> str:
        return "it reads the queue depth at the switch's port, which a DUT does not give"

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        out = []
        excess = params["overload_percent"] / 100 * base.line_rate_bps
        for kb in params["thresholds_kb"]:
            t = int(kb) * 1000
            # the queue grows at the excess rate: run until it passes 3T
            duration_us = 3 * t * 8 / excess * 1e6
            senders, _ = senders_for(base, 2)
            share = (100.0 + params["overload_percent"]) / 2
            streams = [
                {
                    "name": f"ramp{i}",
                    "src": src,
                    "dst": receiver_of(base),
                    "frame_bytes": params["frame_bytes"],
                    "ecn": ECT0,
                    "udp_sport": 41000 + i,
                    "rate_percent": share,
                    "duration_us": duration_us,
                }
                for i, src in enumerate(senders[:2])
            ]
            ecn = {"ecn": {"kmin_bytes": t, "kmax_bytes": 2 * t}}
            out.append(
                Trial(
                    f"t{kb}kb",
                    {"T_bytes": t},
                    base.trial(
                        f"bmwg-ecn-{kb}kb",
                        streams=streams,
                        fabric={"leaf": ecn, "spine": ecn},
                        # samples fine enough to see the ramp: 200 over the run
                        sim={"sample_interval_us": max(0.5, duration_us / 200)},
                    ),
                )
            )
        return out

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        t = int(trial.params["T_bytes"])
        bins = marking_by_depth(run.ports, t)
        marked = [(depth, ratio) for depth, (ratio, _) in sorted(bins.items())]
        # the lower edge of the first depth bin with a mark
        onset = next((d - t / 20 for d, r in marked if r > 0), None)
        below = [bins[d] for d in bins if d < 0.9 * t]
        above = [bins[d] for d in bins if d > 2.1 * t]

        def share(cells: list[tuple[float, int]]) -> float | None:
            packets = sum(p for _, p in cells)
            return sum(r * p for r, p in cells) / packets if packets else None

        queue = max((r["queue_bytes"] or 0 for r in run.ports), default=None)
        return {
            "onset_bytes": onset,
            "deviation_percent": None if onset is None else (onset - t) / t * 100,
            "marked_below_kmin": share(below),
            "marked_above_kmax": share(above),
            "max_queue_bytes": queue,
        }

    def anomalies(
        self, base: Base, params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        return [
            f"T = {r['T_bytes']} bytes: the queue reached {r['max_queue_bytes']:.0f} bytes, not "
            f"past Kmax (2T): the marking above Kmax is not measured (PFC or the buffer held it)"
            for r in rows
            if r.get("max_queue_bytes") is not None and r["max_queue_bytes"] <= 2 * r["T_bytes"]
        ]

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        return [
            *super().deviations(base, params, repeats),
            "Kmax = 2T with the base's Pmax (the draft gives one threshold T, not Kmin, Kmax "
            "or Pmax)",
            "marking read per sampling interval at the busiest port (marks / frames sent in "
            "the interval, against the queue's mean depth over it), not per frame",
        ]


def marking_by_depth(
    ports: Sequence[Mapping[str, Any]], threshold: int
) -> dict[float, tuple[float, int]]:
    """At the port whose queue grew most: per bin of a tenth of `threshold` of queue depth, the
    share of frames marked over the sampling intervals whose mean depth fell in it, and the
    frames sent in them. Depth: the mean of the interval's two samples."""
    by_port: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in ports:
        by_port.setdefault((row["switch"], row["port"]), []).append(row)
    if not by_port:
        return {}
    rows = max(by_port.values(), key=lambda rs: max(r["queue_bytes"] or 0 for r in rs))
    rows = sorted(rows, key=lambda r: r["time_s"])
    step = threshold / 10
    cells: dict[float, list[int]] = {}
    for a, b in itertools.pairwise(rows):
        packets = (b["tx_packets"] or 0) - (a["tx_packets"] or 0)
        if packets <= 0:
            continue
        marks = (b["ecn_marks"] or 0) - (a["ecn_marks"] or 0)
        depth = ((a["queue_bytes"] or 0) + (b["queue_bytes"] or 0)) / 2
        key = (depth // step) * step + step / 2
        cell = cells.setdefault(key, [0, 0])
        cell[0] += marks
        cell[1] += packets
    return {k: (m / p, p) for k, (m, p) in cells.items()}
