"""`emulate report`: re-render a results folder's summary, plots and report.html and print its
table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from emulator.errors import InputError

HELP = "Re-render a results folder (summary, plots, report.html, table)."
# What its work imports (C extensions, then the project), imported first with signals held
# (emulator.cli)
IMPORTS = (
    "yaml",
    "numpy",
    "pyarrow.parquet",
    "matplotlib.backends.backend_agg",
    "collectors.pages.run",
    "collectors.report",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="DIR", help="results folder of a run")
    parser.add_argument(
        "--csv", action="store_true", help="also write CSV copies of the tables into DIR/csv/"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the recomputed summary.json instead of a table"
    )


def main(args: argparse.Namespace) -> int:
    from collectors.pages.kit import REPORT_HTML
    from collectors.pages.run import write_run_report
    from collectors.report import rerender, summary_table

    folder = Path(args.results_dir)
    summary = rerender(folder, write_csv=args.csv)
    # An error here, where a run only warns (collectors.pages.kit.write_or_warn): the page is
    # what this command was asked to write, and summary.json and the plots are already rewritten.
    try:
        page = write_run_report(folder)
    except OSError as exc:
        raise InputError(
            f"{folder / REPORT_HTML}: cannot write the report page ({exc}); "
            "summary.json and the plots were rewritten"
        ) from exc
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(summary_table(summary))
    print(f"\nplots: {folder / 'plots'}\nreport: {page}")
    if args.csv:
        print(f"csv: {folder / 'csv'}")
    return 0
