"""Bench: plan a synthetic 1,000,000-node 16-rank trace; nodes/s and peak memory against loading it.

Run from the repository root: `python -m bench.plan [--nodes N] [--ranks R] [--every K]`, or
`python -m bench.plan --scenario scenarios/moe_mix_16384.yaml` to plan a generated scenario's
trace on the scenario's own fabric, collectives and yardstick (run.ideal) instead (the feeder at 16,384 ranks: the
generator writes the trace set, then loading and planning it are measured as below).
The trace: per rank a dependency chain of 10 us compute nodes (each also waits for the node
three back), every K-th node a 1 MiB collective (ALL_REDUCE and ALL_TO_ALL alternating) over all
ranks. Planning (stream, match, decompose into flows, ideal fluid model on the default Clos) and
loading with emulator.chakra.load_trace_set (the foundation's whole-set reader) each run in a
fresh process so their peak resident memory is their own. Prints one JSON object per figure:
  plan_nodes_per_s   (peer: load_trace_set nodes/s; ratio = plan/load, higher is better)
  plan_peak_memory   (peer: load_trace_set peak; ratio = load/plan, higher is better)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from queue import Empty
from typing import Any

ALL_REDUCE, ALL_TO_ALL = 0, 6


def write_trace(prefix: Path, nodes_total: int, ranks: int, every: int) -> int:
    from emulator.chakra import pb, write_trace_set
    from emulator.workloads.nodes import metadata

    per_rank = nodes_total // ranks
    rank_sets = []
    for _rank in range(ranks):
        nodes = []
        for i in range(per_rank):
            node = pb.Node(id=i + 1, name=f"n{i}")
            node.data_deps.extend(d + 1 for d in (i - 1, i - 3) if d >= 0)
            if i % every == every - 1:
                node.type = pb.COMM_COLL_NODE
                for name, kind, value in (
                    ("comm_type", "int64_val", ALL_REDUCE if (i // every) % 2 else ALL_TO_ALL),
                    ("comm_size", "int64_val", 1 << 20),
                    ("is_cpu_op", "bool_val", False),
                ):
                    attr = node.attr.add()
                    attr.name = name
                    setattr(attr, kind, value)
            else:
                node.type = pb.COMP_NODE
                node.duration_micros = 10
            nodes.append(node)
        rank_sets.append((metadata("bench"), nodes))
    write_trace_set(prefix, rank_sets)
    return per_rank * ranks


def _status_mib(field: str) -> float:
    """VmRSS / VmHWM of this process image from /proc (ru_maxrss survives execve and would
    report the parent's peak)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"/proc/self/status has no {field}")


def _current_rss_mib() -> float:
    return _status_mib("VmRSS")


def _rss_mib() -> float:
    return _status_mib("VmHWM")


def _plan_child(queue: Any, prefix: str, scenario_path: str | None = None) -> None:
    from emulator.schedule.planner import plan_trace

    options: dict[str, Any] = {}
    if scenario_path is not None:
        from emulator.scenario import load_scenario

        scenario = load_scenario(Path(scenario_path))
        from emulator.schedule.ideal import yardstick

        options = {
            "fabric": scenario.fabric,
            "collectives": scenario.collectives,
            "network": yardstick(scenario.run.ideal, scenario.fabric.rank_rate_bps),
        }
    base = _current_rss_mib()
    start = time.perf_counter()
    outcome = plan_trace(prefix, **options)
    elapsed = time.perf_counter() - start
    result = outcome.result
    queue.put(
        {
            "seconds": elapsed,
            "peak_mib": _rss_mib() - base,
            "nodes": result.nodes_completed,
            "flows": result.flows_total,
            "instances": len(result.instances),
            "job_time_s": result.job_time_s,
        }
    )


def _load_child(queue: Any, prefix: str) -> None:
    from emulator.chakra import load_trace_set

    base = _current_rss_mib()
    start = time.perf_counter()
    trace_set = load_trace_set(prefix)
    elapsed = time.perf_counter() - start
    nodes = sum(len(r.nodes) for r in trace_set.ranks)
    queue.put({"seconds": elapsed, "peak_mib": _rss_mib() - base, "nodes": nodes})


def _write_child(queue: Any, prefix: str, nodes: int, ranks: int, every: int) -> None:
    queue.put(write_trace(Path(prefix), nodes, ranks, every))


def _write_scenario_child(queue: Any, prefix: str, scenario_path: str) -> None:
    from emulator.scenario import load_scenario
    from emulator.workloads.registry import write_workload

    scenario = load_scenario(Path(scenario_path))
    if scenario.workload is None or scenario.workload.generate is None:
        raise SystemExit(f"{scenario_path}: workload.generate: bench.plan needs a generated trace")
    paths = write_workload(scenario.workload.generate, prefix)
    queue.put(sum(1 for p in paths if p.name.endswith(".et")))


def _in_child(target: Any, *args: Any) -> Any:
    """target(queue, *args) in a fresh process (its peak memory its own); what it puts. A child
    that exits without putting anything fails the bench at once instead of after the timeout."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(queue, *args))
    process.start()
    deadline = time.monotonic() + 3600
    while True:
        alive = process.is_alive()  # read before the queue: what it put before exiting is there
        try:
            out = queue.get(timeout=1.0)
            break
        except Empty:
            if not alive:
                raise SystemExit(
                    f"bench.plan: {target.__name__} exited {process.exitcode}"
                ) from None
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"bench.plan: {target.__name__} took over an hour") from None
    process.join(timeout=60)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--every", type=int, default=125, help="one collective every K nodes")
    parser.add_argument(
        "--scenario",
        type=Path,
        help="plan this scenario's generated trace on its fabric (instead of the synthetic one)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as folder:
        prefix = Path(folder) / "synthetic"
        start = time.perf_counter()
        if args.scenario is not None:
            ranks = _in_child(_write_scenario_child, str(prefix), str(args.scenario))
            print(
                f"wrote {args.scenario}'s {ranks} rank files in {time.perf_counter() - start:.1f} s",
                file=sys.stderr,
            )
        else:
            nodes = _in_child(_write_child, str(prefix), args.nodes, args.ranks, args.every)
            print(f"wrote {nodes} nodes in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        load = _in_child(_load_child, str(prefix))
        plan = _in_child(_plan_child, str(prefix), str(args.scenario) if args.scenario else None)
        if args.scenario is not None:
            nodes = load["nodes"]
            print(
                f"plan: {plan['seconds']:.1f} s, {plan['peak_mib']:.0f} MiB; "
                f"load: {load['seconds']:.1f} s, {load['peak_mib']:.0f} MiB",
                file=sys.stderr,
            )
    assert plan["nodes"] == nodes == load["nodes"], (plan, load, nodes)
    plan_rate = nodes / plan["seconds"]
    load_rate = nodes / load["seconds"]
    print(
        f"planned {nodes} nodes, {plan['instances']} collectives, {plan['flows']} flows, "
        f"ideal job time {plan['job_time_s']:.4g} s",
        file=sys.stderr,
    )
    figures = [
        {
            "bench": "plan",
            "metric": "plan_nodes_per_s (ratio: plan rate / load rate, higher is better)",
            "value": round(plan_rate, 1),
            "unit": "nodes/s",
            "peer": "emulator.chakra.load_trace_set",
            "peer_value": round(load_rate, 1),
            "ratio": round(plan_rate / load_rate, 4),
        },
        {
            "bench": "plan",
            "metric": "plan_peak_memory (ratio: load peak / plan peak, higher is better)",
            "value": round(plan["peak_mib"], 1),
            "unit": "MiB",
            "peer": "emulator.chakra.load_trace_set",
            "peer_value": round(load["peak_mib"], 1),
            "ratio": round(load["peak_mib"] / max(plan["peak_mib"], 0.1), 3),
        },
        {
            "bench": "plan",
            "metric": "plan_flows_per_s",
            "value": round(plan["flows"] / plan["seconds"], 1),
            "unit": "flows/s",
        },
    ]
    for figure in figures:
        print(json.dumps(figure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
