"""`emulate study sensitivity SCENARIO --link-gbps 400,200,100`: one workload at several link rates.

Runs the scenario once per rate (the first the reference) into OUT/runs/<rate>gbps/, or reuses
finished runs (--reuse DIR...), then writes sensitivity.json, sensitivity.txt, plots/sensitivity.png
and report.html (emulator.studies.sensitivity.page) and prints, per collective type, the slowdown
against the reference beside the rate ratio and whether the type is bandwidth-bound
(emulator.studies.sensitivity).
Every argument, the scenario and the study folder are checked before anything runs. Exit 0 whatever
the verdicts; 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from pathlib import Path

HELP = "Run one scenario at several link rates: slowdown per collective type vs the rate ratio."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario", metavar="SCENARIO", nargs="?", help="the scenario file (a clos fabric)"
    )
    parser.add_argument(
        "--link-gbps",
        metavar="R1,R2,...",
        help="host link rates in Gb/s, the first the reference (e.g. 400,200,100); the fabric "
        "links are scaled by the same ratio, so the oversubscription stays",
    )
    add_backend_arguments(parser, "each rate")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="study folder: runs/, plots/, sensitivity.json, sensitivity.txt, report.html "
        "(default results/sensitivity-<UTC timestamp>)",
    )
    parser.add_argument(
        "--reuse",
        nargs="+",
        metavar="DIR",
        help="analyse finished results folders instead, the first the reference; each one's "
        "rate is its scenario copy's (excludes SCENARIO, --link-gbps, --backend and --tdf)",
    )
    add_include_flagged(parser, "the slowdowns (their rate is not measured)")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument(
        "--json", action="store_true", help="print sensitivity.json instead of tables"
    )


def add_backend_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """--backend, --tdf and --cluster of a study whose runs are `what` (each rate, each
    condition)."""
    parser.add_argument(
        "--backend",
        choices=("netns", "sim", "flow"),
        default=None,
        help=f"what runs {what} (default: the scenario's run.backend): netns, the emulated "
        "Clos (root); sim, the packet-level simulation (no --tdf); flow, the Clos at flow "
        "level",
    )
    add_cluster_argument(parser)
    parser.add_argument(
        "--tdf",
        type=float,
        metavar="X",
        help="time dilation factor of every emulated run (default: the scenario's "
        "run.time_dilation)",
    )


def add_cluster_argument(parser: argparse.ArgumentParser) -> None:
    """--cluster of a study: its runs as tasks over a Ray cluster."""
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help="run the study's runs as tasks over the Ray cluster at ADDRESS (host:port of its "
        "head), a core each, gathered into the study folder; simulated-time backends (sim, "
        "flow) only; the cluster must require Ray's token (docs/cluster.md)",
    )


def add_include_flagged(parser: argparse.ArgumentParser, what: str = "the checks") -> None:
    """--include-flagged of every command that aggregates runs (a study, a series of seeds)."""
    parser.add_argument(
        "--include-flagged",
        action="store_true",
        help="judge the runs the project flagged (partial, or a fidelity verdict other than ok) "
        f"too, and say so in each of {what} that used one; by default they are listed with "
        f"their reasons and left out of {what}",
    )


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.studies.launch import default_out_dir, refuse_with_reuse, study_pool
    from emulator.studies.sensitivity import study as sensitivity

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    # --tdf with a simulation (--backend sim or the scenario's run.backend) is refused by
    # sensitivity.check_study, before anything runs.
    out = Path(args.out) if args.out else default_out_dir(study="sensitivity")
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    if args.reuse is not None:
        refuse_with_reuse(
            (
                ("SCENARIO", args.scenario),
                ("--link-gbps", args.link_gbps),
                ("--backend", args.backend),
                ("--tdf", args.tdf),
                ("--cluster", args.cluster),
            )
        )
        with stdout:
            result = sensitivity.reuse_study(
                [Path(f) for f in args.reuse], out, include_flagged=args.include_flagged
            )
    else:
        if args.scenario is None:
            raise InputError("SCENARIO: give a scenario file (or --reuse DIR... for finished runs)")
        if args.link_gbps is None:
            raise InputError("--link-gbps: give the rates, e.g. --link-gbps 400,200,100")
        rates = sensitivity.parse_rates(args.link_gbps)
        settings = sensitivity.RunSettings(args.backend, args.tdf, not args.no_progress)
        say = functools.partial(print, file=sys.stderr)
        with stdout, study_pool(args.cluster, say) as pool:
            result = sensitivity.run_study(
                Path(args.scenario),
                rates,
                out,
                settings,
                runner=sensitivity.run_at_rate,  # looked up now: tests replace it
                say=say,
                include_flagged=args.include_flagged,
                pool=pool,
            )
    print(json.dumps(result.to_json(), indent=2) if args.json else result.text)
    if result.report is not None and not args.json:
        print(f"report: {result.report}")
    return 0
