"""`emulate generate`: Write a synthetic Chakra trace set (moe_mix, allreduce, alltoall, ...)."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Write a synthetic Chakra trace set (moe_mix, allreduce, alltoall, ...)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate generate` is not yet implemented (tracked in issue #3)")
