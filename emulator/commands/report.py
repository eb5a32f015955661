"""`emulate report`: re-render a results folder's summary and plots and print its table."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Re-render a results folder's summary and plots and print its table."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="DIR", help="results folder of a run")
    parser.add_argument("--csv", action="store_true", help="also write CSV copies of the tables")


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate report` is not yet implemented (tracked in issue #7)")
