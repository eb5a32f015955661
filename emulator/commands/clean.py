"""`emulate clean`: release what a killed run left behind (namespaces, links, qdiscs, BPF), from its state file."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = (
    "Release what a killed run left behind (namespaces, links, qdiscs, BPF), from its state file."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate clean` is not yet implemented (tracked in issue #5)")
