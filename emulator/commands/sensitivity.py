"""`emulate study sensitivity SCENARIO --link-gbps 400,200,100`: one workload at several link rates.

Placeholder being written by a helper (see emulator/sensitivity.py).
"""

from __future__ import annotations

import argparse

HELP = "Run one scenario at several link rates: slowdown per collective type vs the rate ratio."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO", help="the scenario file")


def main(args: argparse.Namespace) -> int:
    raise NotImplementedError
