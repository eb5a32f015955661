"""`emulate study NAME`: the studies, each a subcommand.

`emulate study interference`: each collective alone, then mixed, and the side-by-side report.

Runs scenarios/allreduce_only.yaml, alltoall_only.yaml and moe_mix.yaml --repeats times each
(seeds run.seed, run.seed + 1, ...), or reuses finished results folders, then writes the comparison
plots, study.json and study.txt into the study folder and prints whether the expected interference
shows, with 95% bootstrap intervals. Exit 0 whether or not it shows; 2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

HELP = "Run a study (interference, sensitivity, jobs, load-balancing)."
# What its work imports (C extensions, then the project), imported first with signals held
# (emulator.cli)
IMPORTS = (
    "yaml",
    "numpy",
    "pyarrow.parquet",
    "matplotlib.backends.backend_agg",
    "emulator.run",
    "emulator.studies.launch",
    "emulator.studies.jobs.study",
    "emulator.studies.sensitivity.study",
    "emulator.studies.interference.study",
)


def _flag(role: str) -> str:
    return role.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.commands import jobs_study, sensitivity
    from emulator.studies.load_balancing import cli as lb_study

    studies = parser.add_subparsers(dest="study", metavar="STUDY", title="studies", required=True)
    interference = studies.add_parser(
        "interference", help=INTERFERENCE_HELP, description=INTERFERENCE_HELP
    )
    add_interference_arguments(interference)
    interference.set_defaults(_main=main)
    other = studies.add_parser("sensitivity", help=sensitivity.HELP, description=sensitivity.HELP)
    sensitivity.add_arguments(other)
    other.set_defaults(_main=sensitivity.main)
    jobs = studies.add_parser("jobs", help=jobs_study.HELP, description=jobs_study.HELP)
    jobs_study.add_arguments(jobs)
    jobs.set_defaults(_main=jobs_study.main)
    balancing = studies.add_parser(
        "load-balancing", help=lb_study.HELP, description=lb_study.DESCRIPTION
    )
    lb_study.add_arguments(balancing)
    balancing.set_defaults(_main=lb_study.main)


INTERFERENCE_HELP = "All-Reduce alone, All-to-All alone and both mixed, with repeats and CIs."


def add_interference_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.commands.sensitivity import add_cluster_argument, add_include_flagged
    from emulator.studies.interference.study import DEFAULT_REPEATS, ROLES, SCENARIO_SETS

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
        "--backend",
        choices=("netns", "sim", "flow"),
        default=None,
        help="what runs every scenario (overrides their run.backend): netns, the emulated Clos; "
        "sim, the packet-level simulation (no root, simulated time, no --tdf); flow, the Clos "
        "at flow level",
    )
    add_cluster_argument(parser)
    parser.add_argument(
        "--reference",
        choices=("sim",),
        default=None,
        help="sim: also simulate every emulated run (emulate run --reference sim) and judge the "
        "same checks on the simulations, in <out>/reference-sim/, beside the emulated ones",
    )
    parser.add_argument(
        "--scenario-set",
        choices=sorted(SCENARIO_SETS),
        help="the shipped scenarios of the three roles: main (allreduce_only, alltoall_only, "
        "moe_mix: each collective alone at line rate), ecmp (*_ecmp.yaml: the All-Reduce bound "
        "by ECMP collisions) or strided (*_strided.yaml); --<role> YAML replaces one (default main)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="runs of each scenario, repeat k (0..N-1) with run.seed + k of its scenario, into "
        f"runs/<role>-seed<seed>/; the checks pool them (default {DEFAULT_REPEATS})",
    )
    for role, name in ROLES.items():
        parser.add_argument(
            f"--{_flag(role)}",
            metavar="YAML",
            dest=f"scenario_{role}",
            help=f"scenario of the {role} runs (default scenarios/{name})",
        )
    reuse = parser.add_argument_group(
        "reusing finished runs (instead of running the scenarios; excludes --tdf, --repeats "
        "and scenario paths)"
    )
    for role in ROLES:
        reuse.add_argument(
            f"--reuse-{_flag(role)}",
            nargs="+",
            metavar="DIR",
            dest=f"reuse_{role}",
            help=f"results folders of the {role} runs, one per repeat (give all three roles)",
        )
    reuse.add_argument(
        "--reuse",
        nargs=len(ROLES),
        metavar=tuple(d.upper() for d in ROLES),
        help="one results folder per role, in this order (one repeat each: the checks are then "
        "not measurable, an interval from one run leaves out run-to-run variation)",
    )
    add_include_flagged(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    parser.add_argument("--json", action="store_true", help="print study.json instead of tables")


def reuse_folders(args: argparse.Namespace, roles: Sequence[str]) -> dict[str, list[Path]] | None:
    """role -> reused results folders, from --reuse-<role> DIR... or --reuse A B C; None when
    nothing is reused."""
    from emulator.errors import InputError

    per_role: Mapping[str, list[str] | None] = {
        role: getattr(args, f"reuse_{role}") for role in roles
    }
    given = [role for role, folders in per_role.items() if folders]
    if args.reuse is not None:
        if given:
            raise InputError(
                "--reuse: give either --reuse A B C or --reuse-<role> DIR..., not both"
            )
        return {role: [Path(folder)] for role, folder in zip(roles, args.reuse, strict=True)}
    if not given:
        return None
    missing = [f"--reuse-{_flag(role)}" for role in roles if role not in given]
    if missing:
        raise InputError(f"{', '.join(missing)}: reusing runs needs folders for every role")
    return {role: [Path(folder) for folder in per_role[role] or []] for role in roles}


def main(args: argparse.Namespace) -> int:
    from emulator.errors import InputError
    from emulator.studies.interference.study import (
        DEFAULT_REPEATS,
        ROLES,
        STUDIES,
        run_with_pipeline,
    )
    from emulator.studies.launch import default_out_dir, study_pool

    if args.tdf is not None and not args.tdf >= 1.0:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    if args.backend in ("sim", "flow") and args.tdf is not None:
        raise InputError(
            f"--tdf: a {args.backend} run is in simulated time, it has no dilation factor"
        )
    if args.reference is not None and args.backend in ("sim", "flow"):
        raise InputError(
            f"--reference sim: the runs are simulated already (--backend {args.backend})"
        )
    if args.repeats is not None and args.repeats < 1:
        raise InputError(f"--repeats {args.repeats}: must be at least 1")
    scenarios = {
        role: Path(getattr(args, f"scenario_{role}"))
        for role in ROLES
        if getattr(args, f"scenario_{role}") is not None
    }
    reuse = reuse_folders(args, list(ROLES))
    if reuse is not None and (
        scenarios
        or args.tdf is not None
        or args.repeats is not None
        or args.scenario_set
        or args.reference
        or args.cluster
    ):
        raise InputError(
            "--reuse takes finished runs: it excludes --tdf, --repeats, --scenario-set, "
            "--reference, --cluster and scenario paths"
        )
    out = Path(args.out) if args.out else default_out_dir()
    # With --json stdout carries one document: each run's own table goes to stderr instead.
    stdout = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    say = functools.partial(print, file=sys.stderr)
    with stdout, study_pool(args.cluster, say) as pool:
        result = STUDIES["interference"](
            out,
            scenarios=scenarios,
            reuse=reuse,
            tdf=args.tdf,
            progress=not args.no_progress,
            say=say,
            pool=pool,
            backend=args.backend,
            repeats=args.repeats if args.repeats is not None else DEFAULT_REPEATS,
            scenario_set=args.scenario_set or "main",
            runner=functools.partial(
                run_with_pipeline, backend=args.backend, reference=args.reference
            ),
            reference=args.reference,
            include_flagged=args.include_flagged,
        )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.text)
    return 0
