"""`emulate validate`: check trace sets and scenarios and print what they contain.

Each PATH is a trace prefix (dir/name for dir/name.<rank>.et), a single trace file, or a scenario
(.yaml/.yml; its workload trace is validated when it names one). Every PATH is checked even when
an earlier one fails; each failure is one stderr line naming the file, and the exit code is 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from emulator.errors import EXIT_BAD_INPUT, EXIT_OK, InputError

HELP = "Check trace sets and scenarios; print what they contain."

SCENARIO_SUFFIXES = (".yaml", ".yml")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="trace prefix (dir/name for dir/name.0.et ...), trace file (.et, .et.gz, .json) "
        "or scenario (.yaml)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--comm-groups",
        metavar="FILE",
        help='comm-group JSON {"<pg id>": [ranks]} (default: found next to the traces)',
    )


def main(args: argparse.Namespace) -> int:
    from emulator.chakra.summary import TraceSummary, format_summary, summarize
    from emulator.chakra.traceset import load_trace_set

    summaries: list[TraceSummary] = []
    failed = False
    for raw in args.paths:
        try:
            targets = _traces_of(raw, args)
            found = [summarize(load_trace_set(trace, groups)) for trace, groups in targets]
        except InputError as exc:
            print(f"emulate validate: error: {exc}", file=sys.stderr)
            failed = True
            continue
        for summary in found:
            summaries.append(summary)
            if not args.json:
                print("\n".join(format_summary(summary)))
    if args.json:
        print(json.dumps({"sets": [s.to_json() for s in summaries]}, indent=2))
    return EXIT_BAD_INPUT if failed else EXIT_OK


def _traces_of(raw: str, args: argparse.Namespace) -> list[tuple[Path, Path | None]]:
    """(trace path, comm-group file) to validate for one PATH: the path itself, or a scenario's
    traces (its workload's, or each job's); none for generated work or traffic patterns."""
    explicit = Path(args.comm_groups) if args.comm_groups else None
    if not raw.endswith(SCENARIO_SUFFIXES):
        return [(Path(raw), explicit)]
    try:
        # Lazy: the scenario model imports every layer's parameters, some still being written.
        from emulator.scenario import load_scenario

        scenario = load_scenario(raw)
    except ImportError as exc:
        raise InputError(f"{raw}: scenario validation not available yet ({exc})") from None
    from emulator.scenario.jobs import format_hosts

    jobs = scenario.jobs
    if scenario.several_jobs:
        from emulator.planning.workload import place, trace_prefix

        with trace_prefix(scenario) as prefix:
            placed = place(scenario, prefix, scenario.fabric.ranks)
        if not args.json:
            for p in placed:
                start = f", starting at {p.start_s * 1e6:g} us" if p.start_s else ""
                print(
                    f"{raw}: job {p.name}: {len(p.hosts)} ranks on hosts "
                    f"{format_hosts(p.hosts)}{start}"
                )
    if not jobs:
        if not args.json:
            print(f"{raw}: scenario ok; traffic patterns only, no trace to validate")
        return []
    out = []
    for job in jobs:
        label = f"job {job.name}" if scenario.several_jobs else "workload"
        if job.trace is None:
            if not args.json:
                print(f"{raw}: scenario ok; {label} is generated, no trace to validate")
            continue
        groups = explicit
        if groups is None and job.comm_groups is not None:
            groups = scenario.resolve(job.comm_groups)
        if not args.json:
            print(f"{raw}: scenario ok; {label} trace {job.trace}")
        out.append((scenario.resolve(job.trace), groups))
    return out
