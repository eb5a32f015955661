"""`emulate report`: re-render a results folder's summary and plots and print its table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "Re-render a results folder's summary, plots and table."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="DIR", help="results folder of a run")
    parser.add_argument(
        "--csv", action="store_true", help="also write CSV copies of the tables into DIR/csv/"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the recomputed summary.json instead of a table"
    )


def main(args: argparse.Namespace) -> int:
    from collectors.report import rerender, summary_table

    folder = Path(args.results_dir)
    summary = rerender(folder, write_csv=args.csv)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(summary_table(summary))
    print(f"\nplots: {folder / 'plots'}")
    if args.csv:
        print(f"csv: {folder / 'csv'}")
    return 0
