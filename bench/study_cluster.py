"""Bench: a study's runs spread over a Ray cluster against the same study in one process.

Run from the repository root: `python -m bench.study_cluster [--rates 400,300,200,100]`.

Ours: `emulate study sensitivity` of a small MoE step in simulation (one run per rate) with
`--cluster` over a two-node Ray cluster on this machine (emulator/backends/cluster/local.py:
local_ray, one core per node, Ray's token on), each run a task. Peer, measured in the same run:
the same study with no cluster (the runs one after another in one process). The cluster is
started before either is timed (a cluster outlives many studies); joining it is in ours.
Prints one JSON object per figure:
  study_wall_s   the whole study command, runs and analysis (ratio = peer/ours: the speed-up)
  runs           how many runs each made
The two studies' documents must agree (a simulation is deterministic for a seed): the bench
fails otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = "study_cluster"
PEER = "the same study in one process (no cluster)"
REPO = Path(__file__).resolve().parents[1]

SCENARIO = """\
name: bench_study_cluster
workload:
  generate:
    kind: moe_mix
    ranks: 8
    expert_parallel_size: 4
    dispatch_bytes: 8388608
    allreduce_bytes: 4194304
    iterations: {iterations}
    overlap: true
fabric:
  kind: clos
  hosts_per_leaf: 4
  leaves: 2
  spines: 2
  parallel_links: 2
  host_link_gbps: 400
  fabric_link_gbps: 400
collectives:
  algorithms: {{ALL_REDUCE: ring, ALL_TO_ALL: parallel}}
run: {{backend: sim}}
metrics:
  prometheus: {{enabled: false}}
"""


def emit(metric: str, value: float, unit: str, **extra: Any) -> None:
    print(json.dumps({"bench": BENCH, "metric": metric, "value": value, "unit": unit, **extra}))


def study(scenario: Path, rates: str, out: Path, cluster: str | None) -> float:
    argv = [sys.executable, "-m", "emulator.cli", "study", "sensitivity", str(scenario),
            "--link-gbps", rates, "--out", str(out), "--no-progress"]  # fmt: skip
    if cluster is not None:
        argv += ["--cluster", cluster]
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}\n{proc.stderr}")
    return wall


def _document(out: Path) -> Any:
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("folder", "plots")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return "<path>" if isinstance(value, str) and value.startswith("/") else value

    return strip(json.loads((out / "sensitivity.json").read_text()))


def main(argv: list[str]) -> int:
    from emulator.backends.cluster.local import local_ray

    parser = argparse.ArgumentParser(prog="python -m bench.study_cluster")
    parser.add_argument("--rates", default="400,300,200,100", help="one run per rate")
    parser.add_argument("--iterations", type=int, default=16, help="training steps per run")
    args = parser.parse_args(argv)
    runs = len(args.rates.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-study-cluster-") as tmp:
        root = Path(tmp)
        scenario = root / "scenario.yaml"
        scenario.write_text(SCENARIO.format(iterations=args.iterations))
        with local_ray([{}, {}]) as address:
            os.environ.setdefault("RAY_AUTH_MODE", "token")
            ours = study(scenario, args.rates, root / "ours", address)
        peer = study(scenario, args.rates, root / "peer", None)
        if _document(root / "ours") != _document(root / "peer"):
            raise SystemExit("the study over the cluster read other numbers than the one here")
    emit("runs", runs, "runs")
    emit("study_wall_s", round(ours, 2), "s", peer=PEER, peer_value=round(peer, 2),
         ratio=round(peer / ours, 3), nodes=2, cores_per_node=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
