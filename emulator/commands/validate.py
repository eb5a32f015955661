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
            target = _trace_of(raw, args)
            if target is None:
                continue
            trace, comm_groups = target
            summary = summarize(load_trace_set(trace, comm_groups))
        except InputError as exc:
            print(f"emulate validate: error: {exc}", file=sys.stderr)
            failed = True
            continue
        summaries.append(summary)
        if not args.json:
            print("\n".join(format_summary(summary)))
    if args.json:
        print(json.dumps({"sets": [s.to_json() for s in summaries]}, indent=2))
    return EXIT_BAD_INPUT if failed else EXIT_OK


def _trace_of(raw: str, args: argparse.Namespace) -> tuple[Path, Path | None] | None:
    """(trace path, comm-group file) to validate for one PATH; None for a trace-less scenario."""
    explicit = Path(args.comm_groups) if args.comm_groups else None
    if not raw.endswith(SCENARIO_SUFFIXES):
        return Path(raw), explicit
    try:
        # Lazy: the scenario model imports every layer's parameters, some still being written.
        from emulator.scenario import load_scenario

        scenario = load_scenario(raw)
    except ImportError as exc:
        raise InputError(f"{raw}: scenario validation not available yet ({exc})") from None
    workload = scenario.workload
    if workload is None or workload.trace is None:
        if not args.json:
            what = "traffic patterns only" if workload is None else "workload is generated"
            print(f"{raw}: scenario ok; {what}, no trace to validate")
        return None
    groups = explicit
    if groups is None and workload.comm_groups is not None:
        groups = scenario.resolve(workload.comm_groups)
    if not args.json:
        print(f"{raw}: scenario ok; workload trace {workload.trace}")
    return scenario.resolve(workload.trace), groups
