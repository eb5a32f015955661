"""`emulate validate`: Check trace sets and scenarios and print what they contain."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Check trace sets and scenarios and print what they contain."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate validate` is not yet implemented (tracked in issue #2)")
