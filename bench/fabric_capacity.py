"""What the engine carries on pace inside the emulated fabric, against itself packet by packet and
against its own figure over one veth pair, in the same run.

Run as root from the repository root: `python -m bench.fabric_capacity [--scenario FILE]
[--seconds S]`.

Ours: the load curve `emulate run` calibrates with (emulator/backends/engine/load_curve.py): the
scenario's Clos and ranks, every rank paced at its NIC's line rate over all its peers on the
scenario's queue pairs per peer, at growing offered loads, with the engine's NIC arbiter taking
turns of engine.nic_quantum_bytes. Per point: delivered wall Gb/s, the workers' tick lateness
p99, and worker cores per delivered Gb/s (every worker's run CPU over wall, summed, over the
delivered rate). The on-pace capacity is what the time dilation is chosen from
(emulator/timescale/tdf.py): the most delivered by a point that delivered >= 95% of its offer
with no worker at the fidelity verdict's busy limit; with it, the TDF `time_dilation: auto`
would start from for the scenario and the tick lateness limit that TDF gives (the verdict's:
DCQCN's reaction timer, dilated).
Peers, measured in the same run: the same curve with the arbiter packet by packet
(engine.nic_quantum_bytes 0, this engine before the quantum), the same curve with every read
handled in Python (engine.native_drain off: the receive queue pairs' common path not taken in
C), and the engine over one veth pair
(bench/engine_throughput.py's flat-out queue pair at the path MTU, native path): its workers'
cores per delivered Gb/s (sender and receiver; the sender's alone too). Ratios: capacity with the quantum / packet by packet (higher is
better), cores per Gb/s in the fabric / over the veth pair (lower is better; 1 would be the
fabric and its many queue pairs costing nothing beyond the engine's own sends and reads).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

from emulator.backends.engine import load_curve
from emulator.backends.engine.load_curve import calibration_shape, measure
from emulator.scenario import load_scenario
from emulator.timescale.curve import DELIVERED_OK_RATIO, Calibration
from emulator.timescale.tdf import auto_tdf
from emulator.timescale.verdict import timing_limits_s

BENCH = "fabric_capacity"


def emit(metric: str, value: float, unit: str, **peer: Any) -> None:
    print(
        json.dumps(
            {"bench": BENCH, "metric": metric, "value": round(value, 4), "unit": unit, **peer}
        ),
        flush=True,
    )


def on_pace(calibration: Calibration, busy_limit: float) -> float:
    """The most delivered by a point on pace (>= 95% of its offer, no worker at the limit)."""
    return max(
        (
            p.delivered_bps
            for p in calibration.points
            if p.delivered_ratio >= DELIVERED_OK_RATIO and p.worker_busy_max < busy_limit
        ),
        default=0.0,
    )


def curve_lines(label: str, calibration: Calibration) -> None:
    for p in calibration.points:
        emit(
            f"point_{p.offered_bps / 1e9:g}Gbps ({label})",
            p.delivered_bps / 1e9,
            "Gb/s delivered",
            offered_gbps=p.offered_bps / 1e9,
            tick_late_p99_ms=round(p.tick_late_p99_s * 1e3, 2),
            busiest_worker=p.worker_busy_max,
            cores_per_gbps=round(p.cores_per_gbps, 3),
        )


def compare(
    label: str, ours: Calibration, peer_label: str, peer: Calibration, busy_limit: float
) -> float:
    """Emit on-pace capacity against a peer curve, and cores per delivered Gb/s at the highest
    load both delivered on pace; returns our capacity (b/s)."""
    capacity, peer_capacity = on_pace(ours, busy_limit), on_pace(peer, busy_limit)
    emit(
        f"on_pace_capacity ({label}; higher is better)",
        capacity / 1e9,
        "Gb/s",
        peer=peer_label,
        peer_value=round(peer_capacity / 1e9, 3),
        ratio=round(capacity / peer_capacity, 3) if peer_capacity else None,
    )
    both = [
        (a, b)
        for a in ours.points
        for b in peer.points
        if a.offered_bps == b.offered_bps
        and min(a.delivered_ratio, b.delivered_ratio) >= DELIVERED_OK_RATIO
    ]
    if both:
        a, b = both[-1]
        emit(
            f"fabric_cores_per_gbps_at_{a.offered_bps / 1e9:g}Gbps ({label}; lower is better)",
            a.cores_per_gbps,
            "cores/(Gb/s)",
            peer=peer_label,
            peer_value=round(b.cores_per_gbps, 3),
            ratio=round(a.cores_per_gbps / b.cores_per_gbps, 3) if b.cores_per_gbps else None,
        )
    return capacity


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="scenarios/moe_mix.yaml")
    parser.add_argument("--seconds", type=float, default=4.0, help="per load point")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench.fabric_capacity needs root (network namespaces)", file=sys.stderr)
        return 2
    scenario = load_scenario(Path(args.scenario))
    world = scenario.fabric.ranks
    shape = calibration_shape(scenario, world)
    mtu = scenario.transport.path_mtu_bytes
    busy_limit = scenario.metrics.fidelity.cpu_busy_ratio
    peak_bps = world * scenario.fabric.rank_rate_bps
    p99_limit_s, _ = timing_limits_s(scenario.transport.dcqcn)
    # up to the first point that falls behind (load_curve.STOP_RATIO), from 0.5 Gb/s
    load_curve.LOADS_BPS = tuple(x for x in load_curve.LOADS_BPS if x >= 0.5e9)
    curves: dict[str, Calibration] = {}
    drain_off = "reads one by one in Python (engine.native_drain off)"
    for label, quantum, drain in (
        (f"NIC quantum {shape.nic_quantum_bytes} B", shape.nic_quantum_bytes, True),
        ("packet by packet", 0, True),
        (drain_off, shape.nic_quantum_bytes, False),
    ):
        curves[label] = measure(
            mtu,
            dataclasses.replace(shape, nic_quantum_bytes=quantum),
            seconds=args.seconds,
            drain=drain,
        )
        curve_lines(label, curves[label])
    ours, peer, undrained = curves.values()
    ours_label, peer_label, _ = curves
    # the receive queue pairs' common path in C against the same curve read in Python
    compare(f"{shape.key()}, reads of in-order data in C", ours, drain_off, undrained, busy_limit)
    capacity = compare(shape.key(), ours, peer_label, peer, busy_limit)
    for label, curve in curves.items():
        tdf, why = auto_tdf(peak_bps, curve, scenario.transport.dcqcn, busy_limit)
        emit(
            f"auto_tdf_start ({args.scenario}, {label})",
            tdf,
            "TDF",
            bound_by=why,
            tick_late_p99_limit_ms=round(p99_limit_s * tdf * 1e3, 1),
        )
    # cores per Gb/s at capacity against the engine over a veth pair
    from bench.engine_throughput import ours as veth_flow
    from emulator.engine.testbed import NetnsBed, pair

    with NetnsBed() as bed:
        veth = veth_flow(pair(bed), mtu, 3.0, latency=False)
    # the engine over the veth pair: its sender worker alone (the figure) and both
    # workers (sender and receiver, as the fabric's figure counts every worker)
    veth_sender = veth["sender_busy"] / veth["gbps"]
    veth_both = (veth["sender_busy"] + veth["receiver_busy"]) / veth["gbps"]
    at_capacity = max(
        (p for p in ours.points if p.delivered_bps == capacity), key=lambda p: p.offered_bps
    )
    veth_peer = f"one queue pair over a veth pair at {mtu} B, native path, both workers"
    emit(
        f"fabric_cores_per_gbps_at_capacity ({ours_label}, "
        f"{at_capacity.offered_bps / 1e9:g} Gb/s offered; lower is better)",
        at_capacity.cores_per_gbps,
        "cores/(Gb/s)",
        peer=veth_peer,
        peer_value=round(veth_both, 4),
        ratio=round(at_capacity.cores_per_gbps / veth_both, 2),
        veth_sender_alone=round(veth_sender, 4),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
