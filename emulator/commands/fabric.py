"""`emulate fabric`: bring a scenario's fabric up and hold it (Mininet CLI) for poking at by hand."""

from __future__ import annotations

import argparse

from emulator.errors import NotImplementedYet

HELP = "Bring a scenario's fabric up and hold it (Mininet CLI) for poking at by hand."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up"], help="what to do with the fabric")
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument(
        "--no-cli", action="store_true", help="hold until Ctrl-C instead of the Mininet CLI"
    )


def main(args: argparse.Namespace) -> int:
    raise NotImplementedYet("`emulate fabric` is not yet implemented (tracked in issue #5)")
