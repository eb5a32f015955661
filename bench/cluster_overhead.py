"""Bench: the control plane's cost, one run on this machine against the same run over a two-node
Ray cluster on this same machine (emulator/backends/cluster/local.py), at the same TDF.

Run as root from the repository root: `python -m bench.cluster_overhead [--tdf 8000]`.

Ours: the scenario split by leaf over two "servers" (two Ray nodes, the cables between them as
VXLAN over a veth underlay), coordinator at the driver. Peer, measured in the same run: the same
scenario on this machine with the netns backend (no Ray). Both run the same workers, so what
differs is Ray (raylets, GCS, the actors), the bridge and the tunnels.
Prints one JSON object per figure:
  run_wall_s         the whole `emulate run` (bring-up, replay, teardown; ratio = ours/peer)
  replay_wall_s      from the common start to the end (ratio = ours/peer)
  machine_cpu_s      busy CPU seconds of the whole machine during the run (/proc/stat; ratio =
                     ours/peer, the control plane's overhead)
  dependency_p50_ms, dependency_p99_ms
                     wall time from a flow's completion to the arrival of the flows it released
                     at their worker: across servers (ours) against one machine (peer, through
                     the same coordinator over local pipes); ratio = ours/peer
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from collectors.cpu import read_cpu_jiffies

BENCH = "cluster_overhead"
PEER = "the same scenario on this machine, netns backend (no Ray)"

SCENARIO = """\
name: bench_cluster
workload:
  generate:
    kind: moe_mix
    ranks: {ranks}
    expert_parallel_size: 2
    dispatch_bytes: 1048576
    allreduce_bytes: 4194304
    iterations: {iterations}
    overlap: true
fabric:
  kind: clos
  hosts_per_leaf: {per_leaf}
  leaves: 2
  spines: 2
  host_link_gbps: 400
  fabric_link_gbps: 400
  marker: ebpf
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 4096
metrics:
  sample_interval_s: 0.05
  prometheus: {{port: 0}}
run:
  time_dilation: {tdf}
"""


def _run(path: Path, out: Path, cluster: str | None) -> tuple[dict[str, Any], float, float]:
    from emulator.run import RunOptions, run_scenario
    from emulator.scenario import load_scenario

    hz = os.sysconf("SC_CLK_TCK")
    busy0, _ = read_cpu_jiffies()
    t0 = time.perf_counter()
    result = run_scenario(
        load_scenario(path),
        RunOptions(out_dir=out, progress=False, cluster=cluster, say=lambda _m: None),
    )
    wall = time.perf_counter() - t0
    busy1, _ = read_cpu_jiffies()
    return result.summary, wall, (busy1 - busy0) / hz


def emit(metric: str, value: float | None, peer_value: float | None, unit: str, note: str) -> None:
    ratio = None if not value or not peer_value else round(value / peer_value, 3)
    print(
        json.dumps(
            {
                "bench": BENCH,
                "metric": metric,
                "value": value,
                "unit": unit,
                "peer": PEER,
                "peer_value": peer_value,
                "ratio": ratio,
                "note": note,
            }
        ),
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tdf", type=float, default=8000.0)
    parser.add_argument("--ranks", type=int, default=8, help="even; half under each leaf")
    parser.add_argument("--iterations", type=int, default=4)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("cluster_overhead: needs root (network namespaces, tc, BPF)", file=sys.stderr)
        return 2
    from emulator.backends.cluster.local import local_cluster

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        text = SCENARIO.format(
            ranks=args.ranks, per_leaf=args.ranks // 2, iterations=args.iterations, tdf=args.tdf
        )
        whole = root / "whole.yaml"
        whole.write_text(text)
        peer, peer_wall, peer_cpu = _run(whole, root / "whole", None)
        with local_cluster(root / "state") as lab:
            split = root / "split.yaml"
            split.write_text(text + lab.cluster_yaml({"a": "[0]", "b": "[1]"}))
            ours, wall, cpu = _run(split, root / "split", lab.address)
    note = (
        f"{args.ranks} ranks, moe_mix x{args.iterations}, TDF {args.tdf:g}; verdicts "
        f"{ours['fidelity']['verdict']} (cluster) / {peer['fidelity']['verdict']} (one machine)"
    )
    emit("run_wall_s", round(wall, 2), round(peer_wall, 2), "s", note)
    emit(
        "replay_wall_s",
        ours["engine"]["replay_wall_s"],
        peer["engine"]["replay_wall_s"],
        "s",
        note,
    )
    emit("machine_cpu_s", round(cpu, 2), round(peer_cpu, 2), "s", note)
    cross = ours["engine"]["dependency_latency"].get("cross_server", {})
    same = peer["engine"]["dependency_latency"].get("same_server", {})
    for q in ("p50", "p99"):
        target = cross.get(f"target_{q}_us")
        emit(
            f"dependency_{q}_ms",
            cross.get(f"wall_{q}_ms"),
            same.get(f"wall_{q}_ms"),
            "ms",
            f"{note}; across servers {cross.get('count', 0)} releases, {target} us of target time",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
