"""`emulate plan`: Plan a scenario or trace set into flows and print the ideal (congestion-free) times."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from emulator.errors import EXIT_OK, InputError

HELP = "Plan a scenario or trace into flows with ideal times."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario YAML (or use --trace)")
    parser.add_argument(
        "--trace", metavar="PREFIX", help="plan this trace set (dir/name for dir/name.<rank>.et)"
    )
    parser.add_argument("--comm-groups", metavar="FILE", help="comm-group JSON for --trace")
    parser.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="replay the trace N times (default 1, or the scenario's)",
    )
    parser.add_argument(
        "--algorithm",
        action="append",
        default=[],
        metavar="TYPE=NAME",
        help="algorithm for a collective type, e.g. ALL_REDUCE=halving_doubling (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _algorithms(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        collective, sep, name = item.partition("=")
        if not sep or not collective or not name:
            raise InputError(f"--algorithm {item!r}: expected TYPE=NAME, e.g. ALL_REDUCE=ring")
        out[collective.strip().upper()] = name.strip()
    return out


def main(args: argparse.Namespace) -> int:
    from emulator.schedule.params import CollectivesParams, ComputeParams

    if (args.scenario is None) == (args.trace is None):
        raise InputError("give either a SCENARIO file or --trace PREFIX")
    if args.iterations is not None and args.iterations < 1:
        raise InputError(f"--iterations {args.iterations}: must be at least 1")
    overrides = _algorithms(args.algorithm)
    if args.trace is not None:
        collectives_used = _with_algorithms(CollectivesParams(), overrides)
        outcome = _plan(
            args.trace,
            args.comm_groups,
            None,
            collectives_used,
            ComputeParams(),
            args.iterations or 1,
        )
    else:
        outcome, collectives_used = _plan_scenario(args, overrides)
    for warning in outcome.warnings:
        print(f"emulate plan: warning: {warning}", file=sys.stderr)
    from emulator.schedule.summary import plan_document

    document = plan_document(outcome.result)
    document["fabric"] = outcome.fabric
    from emulator.schedule.params import DEFAULT_ALGORITHMS

    used = {name: collectives_used.algorithm_for(name) for name in DEFAULT_ALGORITHMS}
    used.update(collectives_used.algorithms)
    document["algorithms"] = dict(sorted(used.items()))
    if outcome.jobs:
        document["jobs"] = [{k: v for k, v in j.items() if k != "hosts_text"} for j in outcome.jobs]
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print(_table(document, outcome.world_size))
        for job in outcome.jobs:
            end = job["ideal_end_s"]
            start = f", starting at {job['start_us']:g} us" if job["start_us"] else ""
            print(
                f"job {job['job']}: {len(job['hosts'])} ranks on hosts {job['hosts_text']}"
                f"{start}, {job['collectives']} collectives, ideal end "
                f"{'-' if end is None else f'{end * 1e3:.4g} ms'}"
            )
    return EXIT_OK


def _with_algorithms(params: Any, overrides: dict[str, str]) -> Any:
    if not overrides:
        return params
    import dataclasses

    try:
        return dataclasses.replace(params, algorithms={**params.algorithms, **overrides})
    except ValueError as exc:
        raise InputError(f"--algorithm: {exc}") from None


def _plan(
    prefix: Any,
    comm_groups: Any,
    fabric: Any,
    collectives: Any,
    compute: Any,
    iterations: int,
    sport_seed: int = 0,
    network: Any = None,
) -> Any:
    from emulator.schedule.planner import plan_trace

    return plan_trace(
        prefix,
        comm_groups,
        fabric=fabric,
        collectives=collectives,
        compute=compute,
        iterations=iterations,
        sport_seed=sport_seed,
        network=network,
    )


def _plan_scenario(args: argparse.Namespace, overrides: dict[str, str]) -> tuple[Any, Any]:
    from emulator.planning.workload import trace_prefix
    from emulator.scenario import load_scenario
    from emulator.schedule.ideal import yardstick

    scenario = load_scenario(args.scenario)
    workload = scenario.workload
    if workload is None or scenario.traffic:
        return _plan_with_traffic(scenario, args.iterations), scenario.collectives
    collectives = _with_algorithms(scenario.collectives, overrides)
    groups = scenario.resolve(workload.comm_groups) if workload.comm_groups else None
    with trace_prefix(scenario) as prefix:  # the scenario's trace, or one generated for it
        outcome = _plan(
            prefix,
            groups,
            scenario.fabric,
            collectives,
            scenario.compute,
            args.iterations or workload.iterations,
            scenario.run.seed,
            yardstick(scenario.run.ideal, scenario.fabric.rank_rate_bps),
        )
    return _labelled(outcome, scenario), collectives


EGRESS_LABEL = (
    "; yardstick: each NIC's egress shared, the fabric not seen (run.ideal: egress_share)"
)


def _labelled(outcome: Any, scenario: Any) -> Any:
    """The outcome with its fabric line naming the yardstick when it is not max-min."""
    if scenario.run.ideal != "egress_share":
        return outcome
    import dataclasses

    return dataclasses.replace(outcome, fabric=outcome.fabric + EGRESS_LABEL)


def _plan_with_traffic(scenario: Any, iterations: int | None) -> Any:
    """Traffic patterns (with or without a trace) are planned as `emulate run` plans them."""
    from emulator.planning.workload import plan_workload, trace_prefix
    from emulator.schedule.fabric import describe_fabric
    from emulator.schedule.planner import PlanOutcome

    if iterations is not None:
        scenario = scenario.with_iterations(iterations)
    with trace_prefix(scenario) as prefix:
        planned = plan_workload(
            scenario, prefix, scenario.fabric.ranks, scenario.fabric.rank_rate_bps
        )
    jobs = []
    if scenario.several_jobs:
        from emulator.scenario.jobs import format_hosts

        for p in planned.placements:
            mine = [r for r in planned.ideal.instances if r.job == p.name]
            jobs.append(
                {
                    "job": p.name,
                    "hosts": list(p.hosts),
                    "hosts_text": format_hosts(p.hosts),
                    "iterations": p.iterations,
                    "start_us": round(p.start_s * 1e6, 6),
                    "collectives": len(mine),
                    "ideal_end_s": max((r.end_s for r in mine), default=None),
                }
            )
    return _labelled(
        PlanOutcome(
            planned.ideal,
            planned.world_size,
            describe_fabric(scenario.fabric),
            planned.warnings,
            jobs,
        ),
        scenario,
    )


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _time(seconds: float) -> str:
    for factor, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
        if seconds >= factor:
            return f"{seconds / factor:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def _table(document: dict[str, Any], world_size: int) -> str:
    header = (
        "type",
        "n",
        "size",
        "algorithm",
        "instances",
        "flows",
        "wire bytes",
        "ideal time",
        "busbw",
    )
    rows = [header]
    for c in document["collectives"]:
        rows.append(
            (
                c["type"],
                str(c["group_size"]),
                _si(c["bytes"], "B"),
                c["algorithm"],
                str(c["instances"]),
                str(c["flows"]),
                _si(c["wire_bytes"], "B"),
                _time(c["ideal_time_s"]),
                _si(c["ideal_busbw_bytes_per_s"], "B/s"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    if len(rows) == 1:
        lines.append("(no communication)")
    lines.append("")
    lines.append(f"fabric {document['fabric']}")
    lines.append(
        f"ranks {world_size}, flows {document['flows_total']}, payload bytes "
        f"{document['bytes_total']}, ideal job time {_time(document['ideal_job_time_s'])}"
    )
    return "\n".join(lines)
