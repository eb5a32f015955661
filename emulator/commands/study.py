"""`emulate study interference`: each collective alone, then mixed, and the side-by-side report.

Runs scenarios/allreduce_only.yaml, alltoall_only.yaml and moe_mix.yaml (or reuses their results
folders), then writes the comparison plots, study.json and study.txt into the study folder and
prints whether the expected interference shows. Exit 0 whether or not it shows; 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

HELP = "Run a study (interference: collectives alone vs mixed)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.study import ROLES, STUDIES

    parser.add_argument("study", choices=sorted(STUDIES), help="the study to run")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="study folder: runs/, plots/, study.json, study.txt (default "
        "results/interference-<UTC timestamp>)",
    )
    parser.add_argument(
        "--tdf",
        type=float,
        metavar="X",
        help="time dilation factor for every run (default: each scenario's run.time_dilation)",
    )
    parser.add_argument(
        "--reuse",
        nargs=len(ROLES),
        metavar=tuple(d.upper() for d in ROLES),
        help="use these results folders (All-Reduce alone, All-to-All alone, mixed) instead of "
        "running the scenarios",
    )
    for role, name in ROLES.items():
        parser.add_argument(
            f"--{role.replace('_', '-')}",
            metavar="YAML",
            dest=f"scenario_{role}",
            help=f"scenario of the {role} run (default scenarios/{name})",
        )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print study.json instead of tables")


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.study import ROLES, STUDIES, default_out_dir

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    scenarios = {
        role: Path(getattr(args, f"scenario_{role}"))
        for role in ROLES
        if getattr(args, f"scenario_{role}") is not None
    }
    if args.reuse is not None and (scenarios or args.tdf is not None):
        raise InputError("--reuse takes finished runs: it excludes --tdf and scenario paths")
    out = Path(args.out) if args.out else default_out_dir()
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with stdout:
        result = STUDIES[args.study](
            out,
            scenarios=scenarios,
            reuse=[Path(d) for d in args.reuse] if args.reuse is not None else None,
            tdf=args.tdf,
            progress=not args.no_progress,
            say=lambda line: print(line, file=sys.stderr),
        )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.text)
    return 0
