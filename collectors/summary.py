"""summary.json of a run: identity (scenario, TDF, marker, fabric), fidelity verdict, job time,
and per collective type the busbw and FCT statistics that the interference study compares.

Computed from the Arrow tables (collectors.tables), so `emulate report` recomputes the same
summary from the parquet files (`load_balance`: collectors.balance; `reordering`:
collectors.reordering, with the run's multipath setup carried in RunMeta). Percentiles are
nearest-rank (collectors.stats); busbw statistics cover complete instances, FCT statistics
finished flows; `instances` counts the planned instances of a type (`instances_complete` those
that finished); `cnps` counts CNPs sent by receivers for the type's flows. Byte rates are
bytes per second, times seconds of the target timescale.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow.compute as pc

from collectors.attribution import attribution_summary
from collectors.balance import load_balance_summary
from collectors.live import RunInfo
from collectors.reordering import MultipathSetup, reordering_summary
from collectors.stats import coefficient_of_variation, mean, percentile_nearest_rank
from collectors.tables import RunTables, column, rows

PERCENTILE_METHOD = "nearest-rank"
CV_METHOD = "population standard deviation / mean"


@dataclass(frozen=True)
class Fidelity:
    """Whether the machine kept up with the emulated fabric; reasons say what went wrong and
    `unknown` which checks had no data to judge (the verdict is then "unknown", never "ok")."""

    verdict: Literal["ok", "degraded", "unknown"] = "ok"
    reasons: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    # what the backend's model of the fabric does not include (a simulation: no CPU, no
    # kernel); said beside the verdict, never a reason against it
    leaves_out: tuple[str, ...] = ()
    # the same verdict for each part of a backend that has parts (a cluster's servers): the
    # checks on what that part held (its switches, its ranks, its engine workers)
    parts: Mapping[str, Fidelity] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "unknown": list(self.unknown),
        }
        if self.leaves_out:
            out["leaves_out"] = list(self.leaves_out)
        if self.parts:
            out["parts"] = {name: part.to_json() for name, part in self.parts.items()}
        return out

    @classmethod
    def from_json(cls, fid: Mapping[str, Any]) -> Fidelity:
        return cls(
            fid.get("verdict", "ok"),
            tuple(fid.get("reasons", ())),
            tuple(fid.get("unknown", ())),
            tuple(fid.get("leaves_out", ())),
            {name: cls.from_json(part) for name, part in (fid.get("parts") or {}).items()},
        )


@dataclass(frozen=True)
class RunMeta:
    """What the summary says about the run besides the measurements."""

    scenario: str
    tdf: float
    marker: str
    fabric: str
    fidelity: Fidelity = Fidelity()
    job_time_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # reliability, entropy and load balancing as the scenario set them (None: unknown); the
    # results writer fills it from the scenario it keeps
    multipath: MultipathSetup | None = None

    @classmethod
    def from_info(
        cls,
        info: RunInfo,
        fidelity: Fidelity = Fidelity(),
        job_time_s: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> RunMeta:
        return cls(
            info.scenario, info.tdf, info.marker, info.fabric, fidelity, job_time_s, extra or {}
        )

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> RunMeta:
        """The meta part of an existing summary.json (keys this module computes are dropped)."""
        fid = summary.get("fidelity") or {}
        computed = {
            "collectives",
            "jobs",
            "flows",
            "totals",
            "machine",
            "partial",
            "percentile_method",
            "cv_method",
            "load_balance",
            "reordering",
        }
        known = {"scenario", "tdf", "marker", "fabric", "fidelity", "job_time_s"}
        return cls(
            scenario=str(summary.get("scenario", "unknown")),
            tdf=float(summary.get("tdf", 1.0)),
            marker=str(summary.get("marker", "unknown")),
            fabric=str(summary.get("fabric", "unknown")),
            fidelity=Fidelity.from_json(fid),
            job_time_s=summary.get("job_time_s"),
            extra={k: v for k, v in summary.items() if k not in computed | known},
            multipath=MultipathSetup.of_summary(summary),
        )


def _type_stats(
    busbws: list[float],
    ideals: list[float],
    fcts: list[float],
    planned: int,
    paired: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """paired: (busbw, ideal busbw) of the instances that have both; the ratio's numerator and
    denominator are taken over that one set (the others are counted as left out)."""
    p = percentile_nearest_rank
    ideal = mean(ideals)
    busbw_mean = mean(busbws)
    pairs = paired or []
    paired_busbw = mean([b for b, _ in pairs])
    paired_ideal = mean([i for _, i in pairs])
    ratio = paired_busbw / paired_ideal if paired_busbw is not None and paired_ideal else None
    return {
        "instances": planned,
        "instances_complete": len(busbws),
        "busbw_mean_bytes_per_s": busbw_mean,
        "busbw_p50_bytes_per_s": p(busbws, 50),
        "busbw_p5_bytes_per_s": p(busbws, 5),
        "busbw_min_bytes_per_s": min(busbws) if busbws else None,
        "busbw_max_bytes_per_s": max(busbws) if busbws else None,
        "busbw_cv": coefficient_of_variation(busbws),
        "ideal_busbw_bytes_per_s": ideal,
        "busbw_ratio_mean": ratio,
        "busbw_ratio_instances": len(pairs),
        "busbw_ratio_left_out": planned - len(pairs),
        "flows": 0,
        "flows_finished": len(fcts),
        "fct_p50_s": p(fcts, 50),
        "fct_p99_s": p(fcts, 99),
        "fct_p999_s": p(fcts, 99.9),
        "fct_max_s": max(fcts) if fcts else None,
    }


def collectives_summary(tables: RunTables) -> dict[str, dict[str, Any]]:
    planned: defaultdict[str, int] = defaultdict(int)
    busbws: defaultdict[str, list[float]] = defaultdict(list)
    ideals: defaultdict[str, list[float]] = defaultdict(list)
    paired: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
    for ctype, complete, busbw, ideal in rows(
        tables.collectives,
        ("collective_type", "complete", "busbw_bytes_per_s", "ideal_busbw_bytes_per_s"),
    ):
        planned[ctype] += 1
        if complete and busbw is not None:
            busbws[ctype].append(busbw)
            if ideal:
                paired[ctype].append((busbw, ideal))
        if ideal is not None:
            ideals[ctype].append(ideal)
    fcts: defaultdict[str, list[float]] = defaultdict(list)
    flow_counts: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for ctype, fct, cnps, ce, retx in rows(
        tables.flows,
        ("collective_type", "fct_s", "cnps_sent", "ce_marks", "retransmitted_packets"),
    ):
        if fct is not None:
            fcts[ctype].append(fct)
        counts = flow_counts[ctype]
        counts[0] += 1
        counts[1] += cnps
        counts[2] += ce
        counts[3] += retx
    out: dict[str, dict[str, Any]] = {}
    for ctype in sorted(set(planned) | set(flow_counts)):
        stats = _type_stats(
            busbws[ctype], ideals[ctype], fcts[ctype], planned[ctype], paired[ctype]
        )
        n_flows, cnps, ce, retx = flow_counts[ctype]
        stats.update(flows=n_flows, cnps=cnps, ce_marks=ce, retransmitted_packets=retx)
        out[ctype] = stats
    return out


def job_names(tables: RunTables) -> list[str]:
    """The jobs of a run's collectives (traffic patterns, job "", left out), sorted."""
    return sorted({j for j in column(tables.collectives, "job") if j})


def job_tables(tables: RunTables, job: str) -> RunTables:
    """The run's flows and collectives of one job (the other tables whole)."""
    return dataclasses.replace(
        tables,
        flows=tables.flows.filter(pc.equal(tables.flows.column("job"), job)),
        collectives=tables.collectives.filter(pc.equal(tables.collectives.column("job"), job)),
    )


def jobs_summary(tables: RunTables) -> dict[str, dict[str, Any]]:
    """Per job (several jobs on one fabric; a one-workload run has one, named after its
    scenario): its ranks, its own time (first flow start to last flow end) and its collectives
    as the run's `collectives` section gives them. Traffic patterns (job "") are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name in job_names(tables):
        mine = job_tables(tables, name)
        ranks = {r for pair in rows(mine.flows, ("src_rank", "dst_rank")) for r in pair}
        out[name] = {
            "ranks": len(ranks),
            "job_time_s": _job_time(mine),
            "collectives": collectives_summary(mine),
        }
    return out


def job_time_s(tables: RunTables) -> float | None:
    """From the first flow's start to the last flow's end (target seconds), None without
    flows."""
    return _job_time(tables)


def _job_time(tables: RunTables) -> float | None:
    # Arrow's min and max skip nulls (no Python float per flow); None when all are null
    first = pc.min(tables.flows.column("start_s")).as_py()
    last = pc.max(tables.flows.column("end_s")).as_py()
    if first is None or last is None:
        return None
    return float(last - first)


def port_growth(tables: RunTables, name: str) -> dict[tuple[str, str], Any]:
    """Per port, how much a cumulative counter grew between its first and last sample (ports
    whose counter is null, i.e. unknown, are left out). The sampler takes a baseline sample of
    every port when the replay starts, so the first burst counts."""
    first: dict[tuple[str, str], Any] = {}
    last: dict[tuple[str, str], Any] = {}
    for switch, port, value in rows(tables.ports, ("switch", "port", name)):
        if value is None:
            continue
        first.setdefault((switch, port), value)
        last[(switch, port)] = value
    return {k: max(0, last[k] - first[k]) for k in last}


def port_counter_growth(tables: RunTables, name: str) -> int:
    """Sum over ports of how much a cumulative counter grew between its first and last sample."""
    return sum(port_growth(tables, name).values())


def pfc_equivalent(tables: RunTables) -> dict[str, Any]:
    """Where a PFC fabric would have paused: per port with any, the target seconds its queue was
    at or above XOFF and the pauses; `known` is False when no port could tell (no marker data)."""
    seconds = port_growth(tables, "pause_s")
    events = port_growth(tables, "pause_events")
    ports = [
        {"switch": s, "port": p, "pause_s": seconds[(s, p)], "pauses": events.get((s, p), 0)}
        for (s, p) in sorted(seconds)
        if seconds[(s, p)] > 0 or events.get((s, p), 0) > 0
    ]
    ports.sort(key=lambda r: -r["pause_s"])
    return {
        "known": bool(seconds),
        "pause_s": sum(seconds.values()) if seconds else None,
        "pauses": sum(events.values()) if events else None,
        "ports": ports,
    }


def cpu_by_server(tables: RunTables) -> dict[str, Any]:
    """A run over a cluster: each server's CPU busy share, mean and p95 ({} on one machine)."""
    if tables.cpu.num_rows == 0 or "server" not in tables.cpu.column_names:
        return {}
    by: dict[str, list[float]] = {}
    for server, busy in rows(tables.cpu, ("server", "busy_ratio")):
        if server:
            by.setdefault(server, []).append(busy)
    if not by:
        return {}
    return {
        "servers": {
            server: {
                "cpu_busy_mean_ratio": mean(values),
                "cpu_busy_p95_ratio": percentile_nearest_rank(values, 95),
            }
            for server, values in sorted(by.items())
        }
    }


def build_summary(meta: RunMeta, tables: RunTables, partial: bool) -> dict[str, Any]:
    collectives = collectives_summary(tables)
    totals = {
        key: sum(c[key] for c in collectives.values())
        for key in ("cnps", "ce_marks", "retransmitted_packets")
    }
    cpu_busy = column(tables.cpu, "busy_ratio")
    if "server" in tables.cpu.column_names:  # this machine's (the driver's, over a cluster)
        cpu_busy = [b for s, b in rows(tables.cpu, ("server", "busy_ratio")) if s in ("", "driver")]
    summary: dict[str, Any] = {
        "scenario": meta.scenario,
        "tdf": meta.tdf,
        "marker": meta.marker,
        "fabric": meta.fabric,
        "fidelity": meta.fidelity.to_json(),
        "job_time_s": meta.job_time_s if meta.job_time_s is not None else _job_time(tables),
        "partial": partial,
        "percentile_method": PERCENTILE_METHOD,
        "cv_method": CV_METHOD,
        "flows": {
            "planned": tables.flows.num_rows,
            "finished": tables.flows.num_rows - tables.flows.column("end_s").null_count,
        },
        "totals": {
            **totals,
            "switch_drops": port_counter_growth(tables, "drops"),
            "switch_ecn_marks": port_counter_growth(tables, "ecn_marks"),
            "switch_queue_max_bytes": pc.max(tables.ports.column("queue_bytes")).as_py(),
        },
        "pfc_equivalent": pfc_equivalent(tables),
        "machine": {
            "cpu_busy_mean_ratio": mean(cpu_busy),
            "cpu_busy_p95_ratio": percentile_nearest_rank(cpu_busy, 95),
            **cpu_by_server(tables),
        },
        "collectives": collectives,
        "jobs": jobs_summary(tables),
        "attribution": attribution_summary(
            tables.attribution, tables.marks, tables.flows, tables.attribution_measured
        ),
        "load_balance": load_balance_summary(tables.ports),
        "reordering": reordering_summary(tables.queue_pairs, meta.multipath),
    }
    for key, value in meta.extra.items():
        summary.setdefault(key, value)
    return summary
