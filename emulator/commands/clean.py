"""`emulate clean`: release what a killed run left behind (namespaces, links, qdiscs, BPF), from its state file."""

from __future__ import annotations

import argparse
import json
import os

from emulator.errors import EXIT_OK, EnvironmentProblem

HELP = "Release what a killed run left behind, from its state file."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print what was removed as JSON")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the state file's folder (default $CHAKRA_EMULATOR_STATE_DIR or "
        "/run/chakra-emulator): a cluster server's run.cluster.servers[].state_dir",
    )


def main(args: argparse.Namespace) -> int:
    from fabrics.ownership import STATE_DIR_ENV, clean_state, state_path

    # root first: the state file's folder is root's alone, and what it lists only root can delete
    if os.geteuid() != 0:
        raise EnvironmentProblem("`emulate clean` needs root (it deletes namespaces and qdiscs)")
    if args.state_dir:
        os.environ[STATE_DIR_ENV] = args.state_dir
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
