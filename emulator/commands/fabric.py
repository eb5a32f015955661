"""`emulate fabric`: bring a scenario's fabric up and hold it (Mininet CLI) for poking at by hand."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from emulator.errors import EXIT_OK, ScenarioError

if TYPE_CHECKING:
    from emulator.interrupts import Interrupts
    from fabrics.spec import ClosSpec, DutSpec

HOLD_CHECK_S = 0.2  # a signal Python lost is acted on within this

HELP = "Bring a scenario's fabric up and hold it for poking at by hand."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up"], help="what to do with the fabric")
    parser.add_argument("scenario", help="scenario YAML file")
    parser.add_argument(
        "--no-cli", action="store_true", help="hold until Ctrl-C instead of the Mininet CLI"
    )
    parser.add_argument(
        "--time-dilation",
        type=float,
        metavar="TDF",
        help="link rates divided by TDF, delays multiplied (default: the scenario's run."
        "time_dilation, or 1 when that is auto)",
    )
    parser.add_argument("--json", action="store_true", help="print the fabric's layout as JSON")
    parser.add_argument(
        "--netns-prefix", default="emu-", help="name prefix of the fabric's namespaces (emu-)"
    )


def main(args: argparse.Namespace) -> int:
    from emulator.scenario import load_scenario
    from fabrics.netns import check_root

    scenario = load_scenario(args.scenario)
    check_root()
    tdf = args.time_dilation
    if tdf is None:
        value = scenario.run.time_dilation
        tdf = float(value) if isinstance(value, int | float) else 1.0
    if tdf < 1:
        raise ScenarioError(f"--time-dilation: {tdf:g} must be at least 1")
    from emulator.interrupts import Interrupts
    from fabrics.spec import ClosSpec, DutSpec

    spec = scenario.fabric
    if not isinstance(spec, DutSpec | ClosSpec):
        raise ScenarioError(f"{args.scenario}: fabric: {type(spec).__name__} cannot be brought up")
    # SIGTERM tears down like Ctrl-C: the finally blocks below release every resource. A signal
    # whose KeyboardInterrupt Python lost (raised in a garbage-collector callback) is still
    # pending, and the hold loop raises it.
    interrupts = Interrupts()
    with interrupts.handled():
        if isinstance(spec, DutSpec):
            return _hold_dut(args, spec, interrupts)
        return _hold_clos(args, spec, tdf, interrupts)


def _say(msg: str) -> None:
    print(f"emulate fabric: {msg}", file=sys.stderr, flush=True)


def _hold(interrupts: Interrupts) -> None:
    """Until Ctrl-C or SIGTERM (their handler raises in the sleep; `check` raises one lost)."""
    while True:
        interrupts.check()
        time.sleep(HOLD_CHECK_S)


def _hold_clos(args: argparse.Namespace, spec: ClosSpec, tdf: float, interrupts: Interrupts) -> int:
    from fabrics.netns import bring_up
    from fabrics.shell import FabricShell
    from fabrics.topology import build_clos

    try:
        topo = build_clos(spec)
    except ValueError as exc:
        raise ScenarioError(f"{args.scenario}: fabric: {exc}") from None
    _say(f"bringing up {len(topo.hosts)} hosts, {len(topo.routers)} routers, TDF {tdf:g}")
    live = bring_up(
        topo,
        rate_scale=1 / tdf,
        delay_scale=tdf,
        marker=spec.marker,
        progress=_say,
        prefix=args.netns_prefix,
        builder=spec.builder,
    )
    try:
        layout = {
            **live.metadata(),
            "ranks": [
                {
                    "rank": r,
                    "host": h,
                    "netns": live.netns_of(h),
                    "address": str(topo.host_address(h)),
                }
                for r, h in enumerate(topo.hosts)
            ],
        }
        if args.json:
            print(json.dumps(layout), flush=True)
        else:
            for rank in layout["ranks"]:
                print(
                    f"rank {rank['rank']:4} {rank['host']:6} {rank['netns']:20} {rank['address']}"
                )
        if args.no_cli:
            _say("up; Ctrl-C tears it down")
            _hold(interrupts)
        else:
            FabricShell(live).cmdloop()
    finally:
        removed = live.close()
        _say(f"torn down ({len(removed)} resources released)")
    return EXIT_OK


def _hold_dut(args: argparse.Namespace, spec: DutSpec, interrupts: Interrupts) -> int:
    from fabrics.dut import bring_up_dut

    live = bring_up_dut(spec, prefix=args.netns_prefix)
    try:
        ranks = [
            {"rank": r, "netns": live.rank_netns(r), "address": live.rank_address(r)}
            for r in range(live.ranks)
        ]
        if args.json:
            print(json.dumps({**live.metadata(), "ranks": ranks}), flush=True)
        else:
            for rank in ranks:
                print(f"rank {rank['rank']:4} {rank['netns'] or '(root)':20} {rank['address']}")
        _say("ranks bound; Ctrl-C releases them")
        _hold(interrupts)
    finally:
        removed = live.close()
        _say(f"released ({len(removed)} resources)")
    return EXIT_OK
