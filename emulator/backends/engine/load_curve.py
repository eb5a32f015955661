"""Measuring this machine's load curve (emulator.timescale.curve) with the engine itself.

The measurement is shaped like the run, with the run's own code: the scenario's Clos (its hosts
per leaf, leaves, spines and parallel links, so packets cross as many hops) with links far
faster than the machine, the scenario's ranks, and every rank paced at its NIC's line rate,
spread over every other rank on `qps_per_peer` queue pairs each (an All-to-All's shape: the most
active QPs a run's worker serves per tick, and its per-tick work grows with them), DCQCN on as in
a run. It is repeated at growing offered loads (aggregate wall-clock bits per second) until the
engine no longer delivers what it offers, on the data path the run will take (`engine.native`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from emulator.engine.params import OffloadChoice
from emulator.errors import EnvironmentProblem
from emulator.scenario.model import Scenario
from emulator.timescale.curve import (
    DEFAULT_SHAPE,
    DELIVERED_OK_RATIO,
    Calibration,
    LoadPoint,
    Shape,
    load_cached,
    machine_key,
    store,
)
from fabrics.spec import ClosSpec

LINK_GBPS = 1000.0  # far above what the machine carries: the links never limit the measurement
# Offered aggregate loads, wall-clock bits per second; the curve stops at the first point that
# delivers less than STOP_RATIO of its offer.
LOADS_BPS: tuple[float, ...] = (0.25e9, 0.5e9, 1e9, 2e9, 3e9, 4e9, 6e9, 8e9, 12e9, 16e9)
STOP_RATIO = 0.8


def calibration_shape(scenario: Scenario, world: int) -> Shape:
    """The scenario's fabric and QPs, for a calibration shaped like its run."""
    fabric = scenario.fabric
    qps = scenario.collectives.qps_per_peer
    quantum = scenario.engine.nic_quantum_bytes
    if isinstance(fabric, ClosSpec) and fabric.pods == 1:
        return Shape(
            fabric.hosts_per_leaf,
            fabric.leaves,
            fabric.spines,
            fabric.parallel_links,
            qps,
            world,
            quantum,
        )
    # several pods: the same number of ranks on one pod's two tiers
    leaves = max(2, math.ceil(world / 16))
    return Shape(max(1, math.ceil(world / leaves)), leaves, 2, 1, qps, world, quantum)


def calibrate(
    path_mtu_bytes: int,
    shape: Shape = DEFAULT_SHAPE,
    *,
    native: OffloadChoice = "auto",
    seconds: float = 1.0,
    refresh: bool = False,
    say: Any = None,
) -> Calibration:
    """The cached calibration for this machine, shape and the data path a run with `native`
    (engine.native) takes here, or a new measurement on that path (as root)."""
    from emulator.engine.native_path import expected_path

    data_path = expected_path(native)
    if not refresh:
        cached = load_cached(path_mtu_bytes, shape=shape, data_path=data_path)
        if cached is not None:
            return cached
    if say is not None:
        say(
            f"calibrating what this machine emulates on time: paced loads through {shape.key()} "
            f"on the {data_path} data path (once per machine and shape)"
        )
    result = measure(path_mtu_bytes, shape, seconds=seconds, native=native)
    store(result)
    return result


def measure(
    path_mtu_bytes: int,
    shape: Shape = DEFAULT_SHAPE,
    *,
    seconds: float = 1.0,
    native: OffloadChoice = "auto",
    drain: bool = True,
) -> Calibration:
    """The load curve: `seconds` of paced traffic at each load of LOADS_BPS (as root), on the
    data path `native` gives (engine.native; `drain`: engine.native_drain); keyed by the path
    the workers reported."""
    from emulator.engine.coordinator import run_plan
    from emulator.engine.native_path import summarize
    from emulator.engine.params import EngineParams
    from emulator.engine.plan import EngineFlow, RankEndpoint
    from emulator.transport.params import TransportParams
    from fabrics.registry import bring_up_fabric
    from fabrics.spec import ClosSpec

    if os.geteuid() != 0:
        raise EnvironmentProblem("calibrating the time dilation needs root (network namespaces)")
    spec = ClosSpec(
        hosts_per_leaf=shape.hosts_per_leaf,
        leaves=shape.leaves,
        spines=shape.spines,
        host_link_gbps=LINK_GBPS,
        fabric_link_gbps=LINK_GBPS,
        parallel_links=shape.parallel_links,
        marker="none",
    )
    transport = TransportParams(path_mtu_bytes=path_mtu_bytes, retransmit_timeout_s=0.05)
    n, qps = shape.ranks, shape.qps_per_peer
    pairs = [(src, dst) for src in range(n) for dst in range(n) if src != dst]
    points: list[LoadPoint] = []
    paths: list[dict[str, Any]] = []
    engine = EngineParams(
        native=native, nic_quantum_bytes=shape.nic_quantum_bytes, native_drain=drain
    )
    started = time.perf_counter()
    with bring_up_fabric(spec, time_dilation=1.0, prefix="emucal-") as live:
        for offered in LOADS_BPS:
            nic_bps = offered / n
            ranks = [
                RankEndpoint(r, live.rank_address(r), live.rank_netns(r), nic_bps) for r in range(n)
            ]
            # each NIC at its line rate, spread over every peer: no receiver is oversubscribed
            size = max(1 << 14, int(nic_bps / 8 * seconds / ((n - 1) * qps)))
            flows = [
                EngineFlow(i * qps + q, src, dst, q, 49152 + (i * qps + q) % 16000, size)
                for i, (src, dst) in enumerate(pairs)
                for q in range(qps)
            ]
            outcome = run_plan(ranks, flows, transport=transport, engine=engine)
            paths.append(outcome.metadata.get("data_path") or {})
            start = min(ev.time_s for ev in outcome.started.values())
            end = max(ev.time_s for ev in outcome.finished.values())
            delivered = sum(outcome.received_bytes.values()) * 8 / max(end - start, 1e-6)
            lateness = [w for w in outcome.metadata.get("worker_tick_lateness", []) if w]
            point = LoadPoint(
                offered_bps=offered,
                delivered_bps=min(delivered, offered * 1.5),
                tick_late_p99_s=max((w["p99_s"] for w in lateness), default=0.0),
                tick_late_max_s=max((w["max_s"] for w in lateness), default=0.0),
                worker_busy_max=max(outcome.metadata.get("worker_busy_ratio") or [0.0]),
                workers_busy_total=sum(outcome.metadata.get("worker_busy_ratio") or [0.0]),
            )
            points.append(point)
            if point.delivered_ratio < STOP_RATIO:
                break
    on_pace = [p.delivered_bps for p in points if p.delivered_ratio >= DELIVERED_OK_RATIO]
    data_path = summarize(paths)["path"]
    return Calibration(
        capacity_bps=max(on_pace, default=0.0),
        flows=len(pairs) * qps,
        path_mtu_bytes=path_mtu_bytes,
        measured_s=round(time.perf_counter() - started, 3),
        machine=machine_key(path_mtu_bytes, shape, data_path),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        points=tuple(points),
        data_path=data_path,
    )
