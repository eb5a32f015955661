"""The run's metadata (summary.json "engine") from what the coordinator's workers reported: their
start-up info (pid, offloads, data path, send path) and their last stats (counters, drops, per
traffic class, CPU, timing, pacing, the AF_XDP ports), with the coordinator's own dependency and
one-way latency."""

from __future__ import annotations

from collections import Counter
from typing import Any

from emulator.engine.native_path import summarize as summarize_data_paths
from emulator.engine.xdp_ports import summarize as summarize_xdp
from emulator.latency import LatencyHistogram

CLASS_COLUMNS = ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes")


def run_metadata(
    infos: list[dict[str, Any]],
    stats: list[dict[str, Any]],
    *,
    tdf: float,
    wall_s: float,
    run_wall_s: float,
    dependency_latency: dict[str, Any],
    latency_by_class: dict[int, LatencyHistogram],
    receive_wait: dict[str, Any] | None = None,
    coordinator_gc_pauses: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Per worker its `infos` ("ready") and `stats` (its last report), in worker order;
    `wall_s` from the coordinator's creation, `run_wall_s` from the common start."""
    drops: Counter[str] = Counter()
    counters: Counter[str] = Counter()
    classes: dict[int, list[int]] = {}
    for stat in stats:
        drops.update(stat.get("drops", {}))
        counters.update(stat.get("counters", {}))
        for dscp, row in stat.get("classes", {}).items():
            total = classes.setdefault(int(dscp), [0, 0, 0, 0])
            for i, v in enumerate(row):
                total[i] += v
    xdp_ports = [port for stat in stats for port in stat.get("af_xdp", [])]
    xdp = any(i.get("send_path") == "af_xdp" for i in infos)
    return {
        "tdf": tdf,
        "workers": len(infos),
        "worker_pids": [i.get("pid") for i in infos],
        "gso": all(i.get("gso", False) for i in infos),
        "gro": all(i.get("gro", False) for i in infos),
        "send_path": "af_xdp"
        if xdp
        else "udp_gso"
        if all(i.get("gso", False) for i in infos)
        else "one_per_send",
        # per AF_XDP port its info and counters (engine.send_path af_xdp)
        **({"af_xdp": summarize_xdp(xdp_ports)} if xdp else {}),
        # native (C burst layout and send) or python, and why (engine.native)
        "data_path": summarize_data_paths([i.get("data_path") or {} for i in infos]),
        "drops": dict(drops),
        "counters": dict(counters),
        # per traffic class (DSCP) over all ranks: what was sent and received, UDP payload
        "classes": {
            str(dscp): dict(zip(CLASS_COLUMNS, row, strict=True))
            for dscp, row in sorted(classes.items())
        },
        "worker_cpu_s": [stat.get("cpu_s", 0.0) for stat in stats],
        # each worker's peak resident memory (getrusage ru_maxrss)
        "worker_max_rss_kb": [stat.get("max_rss_kb", 0) for stat in stats],
        # CPU seconds each worker spent from the common start on (set-up excluded)
        "worker_run_cpu_s": [stat.get("run_cpu_s", 0.0) for stat in stats],
        # share of the run each worker was on a CPU: near 1 means it could not keep up
        "worker_busy_ratio": [round(stat.get("run_cpu_s", 0.0) / run_wall_s, 3) for stat in stats],
        # the longest wall-clock gap between two ticks of any worker: a machine too busy
        # to keep the pacing and timers on time shows here
        "max_tick_gap_s": max((stat.get("max_tick_gap_s", 0.0) for stat in stats), default=0.0),
        # per worker: ticks, p99 and max of how late they fired (wall seconds)
        "worker_tick_lateness": [stat.get("tick_lateness") for stat in stats],
        # per worker: bytes sent and the pacing deficit (bytes the rates allowed but late
        # ticks could not send)
        "worker_pacing": [stat.get("pacing") for stat in stats],
        # per worker: garbage-collector runs per generation, total and longest pause
        "worker_gc_pauses": [stat.get("gc_pauses") for stat in stats],
        # the coordinator's (its heap frozen at the start: emulator/engine/coordinator.py)
        "coordinator_gc_pauses": coordinator_gc_pauses,
        "wall_s": wall_s,
        "replay_wall_s": round(run_wall_s, 3),  # from the common start to the end
        # from a flow's completion at its sender to the arrival of the flows it released
        # at their senders' worker, through this coordinator (wall and target time)
        "dependency_latency": dependency_latency,
        # how long reads waited in the rank sockets before a worker read them (wall and
        # target time; reads without a kernel stamp, AF_XDP's, are not counted)
        "receive_wait": receive_wait or {},
        # one-way latency of data packets per traffic class (DSCP), target timescale
        "latency_by_class": {
            str(dscp): h.summary_us().to_json() for dscp, h in sorted(latency_by_class.items())
        },
    }
