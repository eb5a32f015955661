"""Issue 4, "what must be shown" 5: large ring flows and a many-small-flow all-to-all sharing host
downlinks on a 2-leaf, 2-spine Clos at 100 Gb/s (NVIDIA DCQCN defaults, HPCC ECN thresholds).

Reported, not asserted beyond sanity: CNPs and FCT percentiles per class, mixed and alone. Run
with `-s` to see the table.
"""

from __future__ import annotations

import math

from tests.integration.in_memory import Flow, LinkSpec, Network, clos

HOSTS = [f"h{leaf}_{i}" for i in range(4) for leaf in range(2)]  # ring order alternates leaves
RING_BYTES = 16_000_000
A2A_BYTES = 256_000
A2A_START_S = 0.0005


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(math.ceil(q / 100 * len(ordered)) - 1, 0)
    return ordered[rank]


def build(*, ring: bool, alltoall: bool) -> tuple[Network, dict[str, list[Flow]]]:
    net = clos(leaves=2, spines=2, hosts_per_leaf=4, link=LinkSpec(rate_bps=100e9), seed=42)
    classes: dict[str, list[Flow]] = {"ring": [], "alltoall": []}
    if ring:
        for i, src in enumerate(HOSTS):
            dst = HOSTS[(i + 1) % len(HOSTS)]
            classes["ring"].append(
                net.add_flow(src, dst, RING_BYTES, label="ring", record_deliveries=True)
            )
    if alltoall:
        for src in HOSTS:
            for dst in HOSTS:
                if src != dst:
                    classes["alltoall"].append(
                        net.add_flow(
                            src,
                            dst,
                            A2A_BYTES,
                            start_s=A2A_START_S,
                            label="alltoall",
                            record_deliveries=True,
                        )
                    )
    net.run(until_s=0.5)
    return net, classes


def summary(name: str, flows: list[Flow]) -> dict[str, float]:
    fcts_us = [f.completed.fct_s * 1e6 for f in flows if f.completed is not None]
    return {
        "flows": len(flows),
        "completed": len(fcts_us),
        "cnps": sum(f.sender.cnps_received for f in flows),
        "p50_us": percentile(fcts_us, 50),
        "p99_us": percentile(fcts_us, 99),
        "max_us": max(fcts_us),
        "retx_packets": sum(f.sender.packets_retransmitted for f in flows),
    }


def test_ring_and_alltoall_interference_on_clos() -> None:
    rows: dict[str, dict[str, float]] = {}
    runs = {"mixed": (True, True), "ring alone": (True, False), "alltoall alone": (False, True)}
    for run, (ring, a2a) in runs.items():
        net, classes = build(ring=ring, alltoall=a2a)
        for cls, flows in classes.items():
            if flows:
                rows[f"{cls} ({run})"] = summary(cls, flows)
                for flow in flows:  # sanity: every byte arrived once, in order
                    assert flow.completed is not None
                    assert flow.receiver.delivered_bytes == flow.size_bytes
        marks = sum(p.marks for p in net.ports.values())
        drops = sum(p.drops for p in net.ports.values())
        rows[f"fabric ({run})"] = {"marks": marks, "drops": drops}
    print()
    for name, row in rows.items():
        print(f"{name:26s} " + "  ".join(f"{k}={v:.0f}" for k, v in row.items()))
    mixed, alone = rows["alltoall (mixed)"], rows["alltoall (alltoall alone)"]
    assert mixed["completed"] == alone["completed"] == 56
    # sanity only: sharing downlinks with ring flows cannot make the all-to-all faster at its tail
    assert mixed["p99_us"] >= alone["p50_us"]
    assert rows["ring (mixed)"]["completed"] == 8
