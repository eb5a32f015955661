"""`emulate clean`: release what a killed run left behind (namespaces, links, qdiscs, BPF), from its state file."""

from __future__ import annotations

import argparse
import json
import os

from emulator.errors import EXIT_OK, EnvironmentProblem

HELP = "Release what a killed run left behind, from its state file."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print what was removed as JSON")


def main(args: argparse.Namespace) -> int:
    from fabrics.ownership import clean_state, state_path

    # root first: the state file's folder is root's alone, and what it lists only root can delete
    if os.geteuid() != 0:
        raise EnvironmentProblem("`emulate clean` needs root (it deletes namespaces and qdiscs)")
    path = state_path()
    cleaned = clean_state(path)
    if cleaned is None:
        _report(args, [], f"nothing to clean: no state file at {path}")
        return EXIT_OK
    removed, pid = cleaned
    _report(args, removed, f"removed {len(removed)} resources left by pid {pid} ({path})")
    return EXIT_OK


def _report(args: argparse.Namespace, removed: list[str], summary: str) -> None:
    if args.json:
        print(json.dumps({"removed": removed, "summary": summary}))
        return
    for item in removed:
        print(f"removed {item}")
    print(summary)
