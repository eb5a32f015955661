"""`emulate plan`: Plan a scenario or trace set into flows and print the ideal (congestion-free) times."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Plan a scenario or trace set into flows and print the ideal (congestion-free) times."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate plan` is not yet implemented (tracked in issue #3)")
