"""`emulate compare`: compare results folders side by side (busbw, FCT percentiles, CNPs) with overlaid plots.

The comparison plots go to --out, by default a new folder `compare-<UTC timestamp>` beside the
first results folder, so no run's own folder is modified. With exactly two folders, the second is
also taken as the reference of the first (collectors.reference): per collective type, the busbw
ratio, CV difference and FCT KS distance against stated bounds, and the deviations beyond them;
when the second folder holds other draws of itself (draws/<n>, as `--reference sim` writes), a
deviation must also exceed what those draws read against it.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

HELP = "Compare results folders side by side, with overlaid plots."
# What its work imports (C extensions, then the project), imported first with signals held
# (emulator.cli)
IMPORTS = (
    "yaml",
    "numpy",
    "pyarrow.parquet",
    "matplotlib.backends.backend_agg",
    "collectors.reference",
    "collectors.report",
    "collectors.summary",
    "collectors.tables",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dirs", metavar="DIR", nargs="+", help="results folders to compare")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="folder for the comparison plots (default: compare-<UTC timestamp> beside the "
        "first DIR)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the runs' summaries as one JSON object"
    )


def main(args: argparse.Namespace) -> int:
    from collectors.reference import compare_runs, draw_folders, reference_lines
    from collectors.report import compare_table, load_run, unique_labels, write_compare_plots
    from collectors.summary import RunMeta, build_summary
    from collectors.tables import read_tables

    runs = [load_run(Path(d)) for d in args.results_dirs]
    first = Path(args.results_dirs[0])
    out = (
        Path(args.out)
        if args.out
        else first.resolve().parent / f"compare-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    )
    paths = write_compare_plots(runs, out)
    reference = None
    if len(runs) == 2:
        draws = [read_tables(d) for d in draw_folders(Path(args.results_dirs[1]))]
        reference = compare_runs(runs[0].tables, runs[1].tables, draws=draws)
    if args.json:
        summaries = {
            label: build_summary(
                RunMeta.from_summary(r.summary), r.tables, bool(r.summary.get("partial"))
            )
            for label, r in zip(unique_labels(runs), runs, strict=True)
        }
        result = {"runs": summaries, "plots": [str(p) for p in paths]}
        if reference is not None:
            result["reference"] = reference
        print(json.dumps(result, indent=2))
        return 0
    print(compare_table(runs))
    if reference is not None:
        print("\nsecond folder as the reference:")
        print("\n".join(reference_lines(reference)))
        points = [r.summary.get("fabric_backend", {}).get("ecn_mark_point") for r in runs]
        if None not in points and points[0] != points[1]:
            print(
                f"note: the runs mark ECN at different points ({points[0]} vs {points[1]}: "
                "fabric.ecn_mark_point), so DCQCN hears of congestion later in one: part of "
                "any difference in marks, CNPs and queues is that, not the machine"
            )
    print(f"\nplots: {out}")
    return 0
