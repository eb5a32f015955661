"""`emulate bmwg PROCEDURE SCENARIO`: a procedure of the IETF BMWG AI-fabric benchmark
(draft-calabria-bmwg-ai-fabric-training-bench) on the scenario's fabric, with the draft's
parameters, and its report (docs/bmwg.md).

Runs each trial `--repeats` times into OUT/runs/, then writes OUT/bmwg.json, report.txt and
report.html with the draft's reporting sections, and prints the results table. Exit 0 whatever
the results (the draft sets no pass/fail); 2 on bad input, before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

HELP = "Run an IETF BMWG AI-fabric benchmark procedure and its report."
IMPORTS = (
    "yaml",
    "numpy",
    "pyarrow.parquet",
    "matplotlib.backends.backend_agg",
    "emulator.run",
    "emulator.studies.launch",
    "emulator.studies.bmwg.runner",
    "emulator.studies.bmwg.report",
    "emulator.scenario",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.studies.bmwg.registry import PROCEDURES

    lines = [f"{name} (section {p.section}): {p.title}" for name, p in PROCEDURES.items()]
    # no argparse choices: an unknown name is refused in one line naming them all
    parser.add_argument("procedure", metavar="PROCEDURE", help="; ".join(lines))
    parser.add_argument("scenario", metavar="SCENARIO", help="the fabric to benchmark")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a procedure parameter (lists comma-separated), e.g. --param n=2,4,8; "
        "docs/bmwg.md lists each procedure's",
    )
    parser.add_argument(
        "--repeats", type=int, metavar="K", help="runs per trial (default: the procedure's)"
    )
    parser.add_argument(
        "--backend",
        choices=("netns", "dut", "sim"),
        default=None,
        help="what runs the trials (default: the scenario's run.backend)",
    )
    parser.add_argument("--tdf", type=float, metavar="X", help="time dilation of emulated runs")
    parser.add_argument(
        "--out", metavar="DIR", help="report folder (default results/bmwg-<procedure>-<time>)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print bmwg.json instead of the table")


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.studies.bmwg.runner import BmwgSettings, run_bmwg
    from emulator.studies.launch import default_out_dir

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    out = Path(args.out) if args.out else default_out_dir(study=f"bmwg-{args.procedure}")
    settings = BmwgSettings(
        backend=args.backend,
        tdf=args.tdf,
        repeats=args.repeats,
        progress=not args.no_progress,
        params=tuple(args.param),
    )
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with stdout:
        result = run_bmwg(
            args.procedure,
            Path(args.scenario),
            out,
            settings,
            say=lambda line: print(line, file=sys.stderr),
        )
    print(json.dumps(result.document, indent=2, default=str) if args.json else result.text)
    if not args.json:
        print(f"report: {result.report}")
    return 0
