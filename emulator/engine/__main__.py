"""`python -m emulator.engine PLAN.json`: run a plan from a JSON file and print the outcome.

PLAN.json: {"ranks": [{"rank", "address", "netns", "line_rate_bps"}...],
"flows": [{"id", "src", "dst", "qp", "udp_sport", "bytes", "deps", "start_delay_s"}...],
"engine": {EngineParams fields}, "transport": {"path_mtu_bytes", "congestion_control", ...}}.
Prints one JSON line with the worker PIDs when the workers are up ("started"), then one with
every flow's start/finish (target seconds) and the run metadata. Exit 130 on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from emulator.engine.coordinator import Coordinator
from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.errors import EXIT_INTERRUPTED, EmulatorError, InputError
from emulator.transport.params import DcqcnParams, TransportParams


def load(path: str) -> tuple[list[RankEndpoint], list[EngineFlow], TransportParams, EngineParams]:
    try:
        with open(path) as f:
            doc: dict[str, Any] = json.load(f)
        ranks = [RankEndpoint(**r) for r in doc["ranks"]]
        flows = [EngineFlow(**{**f, "deps": tuple(f.get("deps", ()))}) for f in doc["flows"]]
        t = dict(doc.get("transport", {}))
        dcqcn = DcqcnParams(**t.pop("dcqcn", {}))
        transport = TransportParams(**t, dcqcn=dcqcn)
        engine = EngineParams(**doc.get("engine", {}))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: {type(e).__name__}: {e}") from None
    return ranks, flows, transport, engine


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m emulator.engine PLAN.json", file=sys.stderr)
        return 2
    try:
        ranks, flows, transport, engine = load(argv[0])
        coordinator = Coordinator(
            ranks,
            flows,
            transport=transport,
            engine=engine,
            on_ready=lambda pids: print(json.dumps({"started": pids}), flush=True),
        )
        outcome = coordinator.run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except EmulatorError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    flows_out = {
        fid: {"start_s": outcome.started[fid].time_s, **dataclasses.asdict(ev)}
        for fid, ev in outcome.finished.items()
    }
    print(json.dumps({"flows": flows_out, "metadata": outcome.metadata}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
