"""`emulate study jobs SCENARIO`: each job of a several-jobs scenario alone, then all together.

Runs the scenario (`workloads:`) and each of its jobs alone on the hosts it has among the others,
--repeats times each (seeds run.seed, run.seed + 1, ...), into OUT/runs/<condition>-seed<seed>/,
then writes jobs.json, jobs.txt and report.html (emulator.studies.jobs.page) and prints, per job and
collective type, busbw, busbw CV and FCT percentiles alone and together with 95% bootstrap
intervals and what the other jobs do to it (emulator.studies.jobs), and the page's path. Everything
is checked before anything runs. Exit 0 whatever the effects; 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from pathlib import Path

HELP = "Each job of a several-jobs scenario alone, then all together: what each does to the other."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.commands.sensitivity import add_backend_arguments, add_include_flagged

    parser.add_argument("scenario", metavar="SCENARIO", help="a scenario with `workloads:`")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        metavar="N",
        help="runs of each condition, repeat k with run.seed + k (default 3)",
    )
    add_backend_arguments(parser, "each condition")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="study folder: runs/, jobs.json, jobs.txt, report.html "
        "(default results/jobs-<UTC timestamp>)",
    )
    add_include_flagged(parser, "every measure")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print jobs.json instead of tables")


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.studies.jobs import study as jobs_study
    from emulator.studies.launch import default_out_dir, study_pool

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    out = Path(args.out) if args.out else default_out_dir(study="jobs")
    settings = jobs_study.JobsSettings(
        args.backend, args.tdf, not args.no_progress, args.repeats, args.include_flagged
    )
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    say = functools.partial(print, file=sys.stderr)
    with stdout, study_pool(args.cluster, say) as pool:
        result = jobs_study.run_study(
            Path(args.scenario),
            out,
            settings,
            runner=jobs_study.run_with_pipeline,  # looked up now: tests replace it
            say=say,
            pool=pool,
        )
    print(json.dumps(result.to_json(), indent=2) if args.json else result.text)
    if result.report is not None and not args.json:
        print(f"report: {result.report}")
    return 0
