"""A small deterministic synthetic run (plan metadata and event stream) for tests, dashboard
development and demos, with no engine: ring All-Reduce then parallel All-to-All per iteration
over `ranks` ranks, DCQCN rate samples, NIC counters and switch-port samples.

The numbers are made up but shaped like the study's (All-to-All FCTs with a tail, CNPs on the
congested port) and physically possible: no rank sends or receives above the line rate, so NIC
utilization stays within 0..1. The seed feeds a local random.Random, never the global RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from collectors.records import CollectiveMeta, FlowMeta
from emulator.events import (
    CpuSample,
    FlowFinished,
    FlowProgress,
    FlowStarted,
    NicSample,
    PortSample,
    RateSample,
    RunEvent,
)

LINE_RATE_BPS = 400e9


@dataclass(frozen=True)
class SyntheticRun:
    flows: list[FlowMeta]
    collectives: list[CollectiveMeta]
    events: list[RunEvent]
    line_rate_bps: float
    duration_s: float


def synthetic_run(
    ranks: int = 4,
    iterations: int = 3,
    allreduce_bytes: int = 64 << 20,
    alltoall_bytes: int = 16 << 20,
    seed: int = 1,
    sample_interval_s: float = 100e-6,
) -> SyntheticRun:
    rng = random.Random(seed)
    byte_rate = LINE_RATE_BPS / 8
    flows: list[FlowMeta] = []
    collectives: list[CollectiveMeta] = []
    events: list[RunEvent] = []
    # (start, end, src, dst, bytes) of every flow, for the NIC counters.
    spans: list[tuple[float, float, int, int, int]] = []
    t = 0.0
    flow_id = 0
    for iteration in range(iterations):
        # Ring All-Reduce: 2(n-1) steps, each rank sends S/n to its successor per step.
        cid = len(collectives)
        chunk = allreduce_bytes // ranks
        step_ideal = chunk / byte_rate
        collectives.append(
            CollectiveMeta(
                cid,
                "ALL_REDUCE",
                "0",
                ranks,
                iteration,
                allreduce_bytes,
                ideal_time_s=2 * (ranks - 1) * step_ideal,
            )
        )
        for step in range(2 * (ranks - 1)):
            step_end = t + step_ideal * rng.uniform(1.12, 1.3)
            for src in range(ranks):
                dst = (src + 1) % ranks
                end = t + (step_end - t) * rng.uniform(0.9, 1.0)
                flows.append(
                    FlowMeta(
                        flow_id,
                        cid,
                        "ALL_REDUCE",
                        iteration,
                        step,
                        src,
                        dst,
                        qp=src * ranks + dst,
                        udp_sport=49152 + flow_id % 1024,
                        bytes=chunk,
                    )
                )
                cnps = rng.randrange(0, 4)
                events.append(FlowStarted(flow_id, t))
                events.append(
                    FlowProgress(
                        flow_id,
                        (t + end) / 2,
                        packets=chunk // 8192,
                        ce_marks=cnps,
                        cnps_sent=cnps,
                        cnps_received=cnps,
                    )
                )
                events.append(
                    FlowFinished(
                        flow_id,
                        end,
                        packets=chunk // 4096,
                        ce_marks=2 * cnps,
                        cnps_sent=2 * cnps,
                        cnps_received=2 * cnps,
                    )
                )
                spans.append((t, end, src, dst, chunk))
                flow_id += 1
            t = step_end
        # Parallel All-to-All: every rank sends S/n to every peer at once; a long tail.
        cid = len(collectives)
        share = alltoall_bytes // ranks
        ideal = share * (ranks - 1) / byte_rate
        collectives.append(
            CollectiveMeta(
                cid, "ALL_TO_ALL", "0", ranks, iteration, alltoall_bytes, ideal_time_s=ideal
            )
        )
        latest = t
        for src in range(ranks):
            for dst in range(ranks):
                if src == dst:
                    continue
                end = t + ideal * max(1.0, rng.lognormvariate(0.3, 0.4))
                latest = max(latest, end)
                flows.append(
                    FlowMeta(
                        flow_id,
                        cid,
                        "ALL_TO_ALL",
                        iteration,
                        0,
                        src,
                        dst,
                        qp=src * ranks + dst,
                        udp_sport=49152 + flow_id % 1024,
                        bytes=share,
                    )
                )
                cnps = rng.randrange(0, 10)
                retx = 1 if rng.random() < 0.1 else 0
                events.append(FlowStarted(flow_id, t))
                events.append(
                    FlowFinished(
                        flow_id,
                        end,
                        packets=share // 4096 + retx,
                        retransmitted_packets=retx,
                        ce_marks=cnps,
                        cnps_sent=cnps,
                        cnps_received=cnps,
                    )
                )
                spans.append((t, end, src, dst, share))
                flow_id += 1
        t = latest
    duration = t
    events.extend(_samples(spans, ranks, duration, sample_interval_s, rng))
    events.sort(key=lambda e: e.time_s)
    return SyntheticRun(flows, collectives, events, LINE_RATE_BPS, duration)


def _samples(
    spans: list[tuple[float, float, int, int, int]],
    ranks: int,
    duration_s: float,
    interval_s: float,
    rng: random.Random,
) -> list[RunEvent]:
    """Cumulative NIC counters (each flow's bytes spread evenly over its life), DCQCN rates and
    two switches' ports with a queue that builds while All-to-All and All-Reduce overlap."""
    out: list[RunEvent] = []
    n_samples = int(duration_s / interval_s) + 2
    port_bytes = [0] * 4
    port_marks = [0] * 4
    for i in range(n_samples):
        now = i * interval_s
        tx = [0] * ranks
        rx = [0] * ranks
        for start, end, src, dst, size in spans:
            if now <= start:
                continue
            done = size if now >= end else int(size * (now - start) / (end - start))
            tx[src] += done
            rx[dst] += done
        for rank in range(ranks):
            out.append(NicSample(now, rank, "tx", tx[rank]))
            out.append(NicSample(now, rank, "rx", rx[rank]))
            out.append(RateSample(now, rank, 0, LINE_RATE_BPS * rng.uniform(0.3, 1.0)))
        out.append(CpuSample(now, rng.uniform(0.3, 0.7)))
        for p in range(4):
            switch, port = f"leaf{p // 2}", f"eth{p % 2 + 1}"
            port_bytes[p] += int(LINE_RATE_BPS / 8 * interval_s * rng.uniform(0.2, 0.9))
            queue = int(rng.uniform(0, 400_000) * (1 + p))
            port_marks[p] += queue // 100_000
            out.append(
                PortSample(
                    now, switch, port, port_bytes[p], port_bytes[p] // 4096, port_marks[p], 0, queue
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Serve a synthetic run's metrics on loopback, replayed over --seconds of wall-clock time:
    `python -m tests.synthetic_run --port 9464 --seconds 120` to try the Grafana dashboard
    without a fabric."""
    import argparse
    import time

    from collectors.live import RunInfo
    from collectors.prometheus import Exporter, make_registry
    from collectors.recorder import RunRecorder

    parser = argparse.ArgumentParser(prog="python -m tests.synthetic_run", description=main.__doc__)
    parser.add_argument("--port", type=int, default=9464)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    run = synthetic_run(ranks=8, iterations=args.iterations)
    recorder = RunRecorder(
        run.flows,
        run.collectives,
        RunInfo("synthetic", 1.0, "none", "synthetic"),
        run.line_rate_bps,
    )
    steps = 100
    chunk = len(run.events) // steps + 1
    with Exporter(make_registry(recorder.live), "127.0.0.1", args.port) as exporter:
        print(f"serving http://127.0.0.1:{exporter.port}/metrics for {args.seconds:g} s")
        for i in range(0, len(run.events), chunk):
            recorder.on_events(run.events[i : i + chunk])
            time.sleep(args.seconds / steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
