"""`emulate study load-balancing SCENARIO`: the scenario under each load-balancing condition.

Runs the scenario under each condition (--conditions; default every one the backend runs),
--repeats times each (seeds run.seed, run.seed + 1, ..., interleaved), into
OUT/runs/<condition>-seed<seed>/, or reads finished runs (--reuse DIR...), then writes
study.json, study.txt, plots/ and report.html (emulator.studies.load_balancing) and prints every
condition's metrics with 95% bootstrap intervals and the checks. Everything is checked before
anything runs. Exit 0 whatever the verdicts; 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from pathlib import Path

HELP = (
    "One scenario under each load balancing (ECMP, spray, flowlet, adaptive) with go-back-N or "
    "selective repeat: busbw, FCT, link balance, reordering and resends, with repeats and CIs."
)
DESCRIPTION = (
    HELP + " Runs the project flagged are left out, except a reordering condition's runs whose "
    "only flag is their retransmissions (what the condition does): those are judged and shown "
    "as waived. Exit 0 whatever the verdicts; 2 on bad input."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.commands.sensitivity import add_backend_arguments, add_include_flagged
    from emulator.studies.load_balancing.conditions import BASELINE, CONDITIONS
    from emulator.studies.load_balancing.study import DEFAULT_REPEATS

    parser.add_argument(
        "scenario",
        metavar="SCENARIO",
        nargs="?",
        help="the scenario file (a clos fabric with a switch tier that has 2 or more next hops)",
    )
    listed = "; ".join(f"{name}: {c.label}" for name, c in CONDITIONS.items())
    parser.add_argument(
        "--conditions",
        metavar="A,B,...",
        help=f"the conditions to run, comma separated ({listed}); default every one the backend "
        f"{BASELINE}, the baseline, is always run. "
        "Each sets the mode on every switch tier with a choice of next hops, ecmp on the others",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help=f"runs of each condition, repeat k with run.seed + k (default {DEFAULT_REPEATS})",
    )
    add_backend_arguments(parser, "each condition")
    parser.add_argument(
        "--reference",
        choices=("sim",),
        default=None,
        help="sim: also simulate every emulated run (emulate run --reference sim) and judge the "
        "same checks on the simulations, in <out>/reference-sim/",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="study folder: runs/, plots/, study.json, study.txt, report.html "
        "(default results/load-balancing-<UTC timestamp>)",
    )
    parser.add_argument(
        "--reuse",
        nargs="+",
        metavar="DIR",
        help="study finished results folders instead, each one's condition and seed read from "
        "its scenario copy (excludes SCENARIO, --conditions, --repeats, --backend, --tdf, "
        "--reference)",
    )
    add_include_flagged(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print study.json instead of tables")


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.studies.launch import default_out_dir, refuse_with_reuse, study_pool
    from emulator.studies.load_balancing import study

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    if args.repeats is not None and args.repeats < 1:
        raise InputError(f"--repeats {args.repeats}: must be at least 1")
    out = Path(args.out) if args.out else default_out_dir(study="load-balancing")
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    if args.reuse is not None:
        refuse_with_reuse(
            (
                ("SCENARIO", args.scenario),
                ("--conditions", args.conditions),
                ("--repeats", args.repeats),
                ("--backend", args.backend),
                ("--tdf", args.tdf),
                ("--reference", args.reference),
                ("--cluster", args.cluster),
            )
        )
        with stdout:
            result = study.reuse_study(
                [Path(f) for f in args.reuse], out, include_flagged=args.include_flagged
            )
    else:
        if args.scenario is None:
            raise InputError("SCENARIO: give a scenario file (or --reuse DIR... for finished runs)")
        settings = study.LbSettings(
            args.backend,
            args.tdf,
            not args.no_progress,
            study.DEFAULT_REPEATS if args.repeats is None else args.repeats,
            args.include_flagged,
            args.reference,
        )
        say = functools.partial(print, file=sys.stderr)
        with stdout, study_pool(args.cluster, say) as pool:
            result = study.run_study(
                Path(args.scenario),
                out,
                settings,
                args.conditions,
                runner=study.run_with_pipeline,  # looked up now: tests replace it
                say=say,
                pool=pool,
            )
    print(json.dumps(result.to_json(), indent=2) if args.json else result.text)
    if result.report is not None and not args.json:
        print(f"report: {result.report}")
    return 0
