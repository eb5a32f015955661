"""`emulate run`: run a scenario end to end: fabric up, replay, measure, results, teardown."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from emulator.errors import EXIT_EXPECTATION_FAILED, EXIT_OK, InputError

HELP = "Run a scenario: fabric up, replay, measure, results, teardown."
# What its work imports (C extensions, then the project), imported first with signals held
# (emulator.cli)
IMPORTS = (
    "yaml",
    "numpy",
    "pyarrow.parquet",
    "matplotlib.backends.backend_agg",
    "emulator.scenario",
    "emulator.run",
    "emulator.studies.seeds.series",
)

DEFAULT_QUICK_FABRIC = "clos"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.commands.sensitivity import add_include_flagged

    parser.add_argument("scenario", nargs="?", help="scenario YAML file")
    parser.add_argument(
        "--trace", metavar="PREFIX", help="run a trace set directly, without a scenario"
    )
    parser.add_argument(
        "--fabric",
        metavar="KIND:KEY=VALUE,...",
        help="with --trace: the fabric, e.g. clos:hosts_per_leaf=4,leaves=2,spines=2 "
        "(keys of the scenario's fabric section; default clos sized for the trace)",
    )
    parser.add_argument("--comm-groups", metavar="FILE", help="with --trace: comm-group JSON")
    parser.add_argument(
        "--iterations", type=int, default=None, help="replay the trace N times (overrides)"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="results folder (default results/<scenario>-<timestamp>)"
    )
    parser.add_argument(
        "--tdf", type=float, default=None, help="time dilation factor (overrides the scenario)"
    )
    parser.add_argument(
        "--recalibrate",
        action="store_true",
        help="with time_dilation auto: measure this machine again instead of the cached value",
    )
    parser.add_argument(
        "--backend",
        choices=("netns", "dut", "sim", "cluster", "flow"),
        default=None,
        help="what runs it (overrides run.backend): netns, the emulated Clos on this machine; "
        "dut, toward a switch under test; sim, a packet-level simulation of the Clos (no root, "
        "simulated time); cluster, the Clos over the servers of run.cluster; flow, the Clos at flow "
        "level (fluid queues and DCQCN rates, for scale)",
    )
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        default=None,
        help="spread the run over a Ray cluster (host:port of its head), placed as the "
        "scenario's run.cluster.servers say; the cluster must require Ray's token "
        "authentication, on every node, and this shell must have the token "
        "(RAY_AUTH_MODE=token, RAY_AUTH_TOKEN[_PATH])",
    )
    parser.add_argument(
        "--reference",
        choices=("sim",),
        default=None,
        help="also simulate the same workload (into <results folder>-reference-sim, with "
        "sim.reference_draws - 1 more draws of it in its draws/ folder) and add, per collective "
        "type, busbw, FCT and CNP agreement to summary.json; a deviation beyond the stated "
        "bounds (collectors/reference.py) and the draws' own spread is a fidelity reason",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="N",
        help="run the scenario N times, with run.seed, run.seed + 1, ... (each a results folder "
        "seed-<seed>/ inside --out), then give busbw, FCT, job time, CNPs and marks with 95%% "
        "confidence intervals over the seeds (seeds.json, seeds.txt)",
    )
    add_include_flagged(parser, "the estimates (with --seeds)")
    parser.add_argument("--no-progress", action="store_true", help="no progress line")
    parser.add_argument(
        "--netns-prefix", default="emu-", help="name prefix of the fabric's namespaces (emu-)"
    )


def _value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def fabric_mapping(text: str | None, world: int) -> dict[str, Any]:
    """`clos:hosts_per_leaf=4,leaves=2` as a scenario `fabric:` mapping; by default a 1:1 Clos
    with up to 8 hosts per leaf and at least `world` hosts."""
    if text is None:
        per_leaf = min(8, world)
        leaves = max(1, -(-world // per_leaf))
        return {"kind": DEFAULT_QUICK_FABRIC, "hosts_per_leaf": per_leaf, "leaves": leaves}
    kind, _, rest = text.partition(":")
    mapping: dict[str, Any] = {"kind": kind.strip()}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--fabric {text!r}: expected KIND:KEY=VALUE,...")
        mapping[key.strip()] = _value(value.strip())
    return mapping


def quick_scenario(args: argparse.Namespace) -> Any:
    """A scenario for `--trace PREFIX`, checked by the same loader as a file."""
    import yaml

    from emulator.scenario.loader import load_dataclass
    from emulator.scenario.model import Scenario
    from emulator.schedule.tracesource import rank_files

    files, _ = rank_files(args.trace)
    prefix = str(Path(args.trace).resolve())
    workload: dict[str, Any] = {"trace": prefix}
    if args.comm_groups:
        workload["comm_groups"] = str(Path(args.comm_groups).resolve())
    document = {
        "name": Path(args.trace).name.split(".")[0] or "trace",
        "workload": workload,
        "fabric": fabric_mapping(args.fabric, len(files)),
    }
    node = yaml.compose(yaml.safe_dump(document), Loader=yaml.SafeLoader)
    return load_dataclass(Scenario, node, Path("--trace/--fabric"))


def main(args: argparse.Namespace) -> int:

    from emulator.run import RunOptions, run_scenario
    from emulator.scenario import load_scenario

    if (args.scenario is None) == (args.trace is None):
        raise InputError("give either a SCENARIO file or --trace PREFIX")
    if args.scenario is not None and (args.fabric or args.comm_groups):
        raise InputError("--fabric and --comm-groups go with --trace; a scenario has its own")
    if args.tdf is not None and args.tdf < 1:
        raise InputError(f"--tdf {args.tdf:g}: must be at least 1")
    if args.seeds is not None and args.seeds < 1:
        raise InputError(f"--seeds {args.seeds}: must be at least 1")
    if args.include_flagged and args.seeds is None:
        raise InputError("--include-flagged goes with --seeds: one run has nothing to pool")
    if args.iterations is not None and args.iterations < 1:
        raise InputError(f"--iterations {args.iterations}: must be at least 1")
    scenario = load_scenario(args.scenario) if args.scenario else quick_scenario(args)
    if args.iterations is not None:
        scenario = scenario.with_iterations(args.iterations)
    options = RunOptions(
        out_dir=Path(args.out) if args.out else None,
        progress=not args.no_progress,
        tdf=args.tdf,
        recalibrate=args.recalibrate,
        fabric_prefix=args.netns_prefix,
        backend=args.backend,
        reference=args.reference,
        cluster=args.cluster,
    )
    if args.cluster is not None:
        if not scenario.run.cluster.servers:
            raise InputError(
                "--cluster: the scenario has no run.cluster.servers (which server hosts which "
                "leaves); add them to run it over a cluster"
            )
        if args.backend not in (None, "cluster"):
            raise InputError(
                f"--cluster: the run goes over the cluster, not --backend {args.backend}"
            )
        options = dataclasses.replace(options, backend="cluster")
    if args.seeds is not None:
        return _run_seeds(scenario, options, args.seeds, args.include_flagged)
    result = run_scenario(scenario, options)
    if result.failed_expectations:
        return EXIT_EXPECTATION_FAILED
    return EXIT_OK


def _run_seeds(scenario: Any, options: Any, count: int, include_flagged: bool = False) -> int:
    import dataclasses

    from emulator.progress import say
    from emulator.studies.seeds.series import default_seeds_dir, pipeline_runner, run_seeds

    out_dir = options.out_dir or default_seeds_dir(scenario)
    runner = pipeline_runner(dataclasses.replace(options, out_dir=None))
    result = run_seeds(scenario, count, out_dir, runner, say, include_flagged=include_flagged)
    print(result.text)
    if result.report is not None:
        print(f"report: {result.report}")
    return EXIT_EXPECTATION_FAILED if result.failed_expectations else EXIT_OK
