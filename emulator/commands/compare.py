"""`emulate compare`: compare results folders side by side (busbw, FCT percentiles, CNPs) with overlaid plots."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Compare results folders side by side (busbw, FCT percentiles, CNPs) with overlaid plots."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dirs", metavar="DIR", nargs="+", help="results folders to compare")


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate compare` is not yet implemented (tracked in issue #7)")
