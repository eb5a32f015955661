"""Bench: the flow-level backend against the packet simulator, on the same scenarios, in the
same run: wall time of the whole run, its replay, peak memory, and the speed-up.

Run from the repository root: `python -m bench.flow [--sim-128] [--json PATH]`.

Each run is its own child process (`python -m bench.flow --child BACKEND SCENARIO`), which
prints its wall time, summary.json's replay wall time and its own peak RSS. Scenarios:
scenarios/moe_mix.yaml (16 hosts) on both backends; scenarios/moe_mix_128.yaml (128 hosts) on
the flow level, and on the packet simulator with --sim-128 (it takes minutes there);
scenarios/moe_mix_1024.yaml (1,024 ranks, three tiers, 2 steps) on the flow level with --1024
(about 3 minutes and 1.9 GB here on 2026-11-29), scenarios/moe_mix_16384.yaml (16,384 ranks)
with --16384 (see docs/flow-level.md for its time and memory). The live
exporter is off on both sides. Printed: a row per (scenario, backend), the ratio sim / flow of
the replay's wall time per scenario (#39's target at 128 hosts: at least 100), and busbw and job
time side by side. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from emulator.run.options import RunOptions
from emulator.run.pipeline import run_scenario
from emulator.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = {
    16: REPO / "scenarios" / "moe_mix.yaml",
    128: REPO / "scenarios" / "moe_mix_128.yaml",
    1024: REPO / "scenarios" / "moe_mix_1024.yaml",  # three tiers, flow level only
    16384: REPO / "scenarios" / "moe_mix_16384.yaml",  # three tiers, flow level only
}


def child(backend: str, scenario_path: str) -> None:
    scenario = load_scenario(Path(scenario_path))
    metrics = dataclasses.replace(
        scenario.metrics, prometheus=dataclasses.replace(scenario.metrics.prometheus, enabled=False)
    )
    scenario = dataclasses.replace(scenario, metrics=metrics)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = run_scenario(
            scenario,
            RunOptions(out_dir=Path(tmp) / "out", progress=False, backend=backend, report=False),
        )
        wall = time.perf_counter() - started
    s = result.summary
    print(
        json.dumps(
            {
                "wall_s": wall,
                "replay_wall_s": (s.get("wall_time") or {}).get("replay_s"),
                "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "job_time_s": s.get("job_time_s"),
                "busbw": {
                    k: v.get("busbw_mean_bytes_per_s") for k, v in s.get("collectives", {}).items()
                },
                "partial": result.partial,
            }
        )
    )


def measure(backend: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.flow", "--child", backend, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=7200,
        check=True,
    )
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "SCENARIO"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--sim-128", action="store_true", help="also simulate 128 hosts packet by packet"
    )
    parser.add_argument(
        "--1024", dest="r1024", action="store_true", help="also the 1,024-rank scenario (flow)"
    )
    parser.add_argument(
        "--16384", dest="r16384", action="store_true", help="also the 16,384-rank scenario (flow)"
    )
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    runs: list[dict[str, Any]] = []
    for hosts, path in SCENARIOS.items():
        if (hosts == 1024 and not args.r1024) or (hosts == 16384 and not args.r16384):
            continue
        backends = ("flow", "sim") if hosts == 16 or args.sim_128 else ("flow",)
        for backend in backends:
            row = {"hosts": hosts, "backend": backend, **measure(backend, path)}
            runs.append(row)
            busbw = {k: round(v / 1e9, 2) for k, v in row["busbw"].items() if v}
            print(
                f"{hosts:4d} hosts  {backend:4s}  wall {row['wall_s']:8.1f} s  replay "
                f"{row['replay_wall_s'] or 0:8.1f} s  peak {row['max_rss_kb'] / 1024:7.0f} MiB  "
                f"job {row['job_time_s'] * 1e3:7.2f} ms  busbw GB/s {busbw}"
            )
        by = {r["backend"]: r for r in runs if r["hosts"] == hosts}
        if "sim" in by and by["flow"]["replay_wall_s"]:
            ratio = by["sim"]["replay_wall_s"] / by["flow"]["replay_wall_s"]
            print(f"{hosts:4d} hosts  replay wall time sim / flow: {ratio:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
