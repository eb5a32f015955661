"""`emulate run`: run a scenario end to end: fabric up, replay, measure, results, teardown."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Run a scenario: fabric up, replay, measure, results, teardown."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario YAML file")
    parser.add_argument(
        "--trace", metavar="PREFIX", help="run a trace set directly, without a scenario"
    )
    parser.add_argument(
        "--out", metavar="DIR", help="results folder (default results/<scenario>-<timestamp>)"
    )


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate run` is not yet implemented (tracked in issue #8)")
