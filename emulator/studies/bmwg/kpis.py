"""The BMWG AI-fabric KPIs (draft-calabria-bmwg-ai-fabric-training-bench-02 section 4, their
definitions in draft-calabria-bmwg-ai-fabric-terminology) read from one run's results folder.

Every KPI here is computed from what the run wrote (summary.json, flows.parquet,
ports.parquet, nic.parquet); a KPI the run did not measure is None, never made up. Rates are
per second of target time. The draft's units: BusBW in Gb/s per accelerator, tail latency and
convergence in microseconds, drops in ppm, PFC pauses in events per second and microseconds.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# terminology draft section 3: BusBW = data x algo_factor / time, the factor fixed per
# collective from the ideal ring whatever algorithm runs (n participants)
ALGO_FACTORS = {
    "ALL_REDUCE": "2(n-1)/n",
    "ALL_GATHER": "(n-1)/n",
    "REDUCE_SCATTER": "(n-1)/n",
    "ALL_TO_ALL": "(n-1)/n",
}


def jfi(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2) (Jain, Chiu and Hawe 1984; the draft's
    section 8.4): 1 when equal, 1/n when one carries all; None without a positive value."""
    xs = [float(v) for v in values]
    total = sum(x * x for x in xs)
    if not xs or total <= 0:
        return None
    return sum(xs) ** 2 / (len(xs) * total)


def mmr(values: Sequence[float]) -> float | None:
    """Max-to-mean ratio (the draft's ECMP imbalance): 1 when equal, n when one carries all."""
    xs = [float(v) for v in values]
    mean = sum(xs) / len(xs) if xs else 0.0
    return max(xs) / mean if mean > 0 else None


def cv(values: Sequence[float | None]) -> float | None:
    """Coefficient of variation over repeats (population standard deviation / mean), the
    draft's repeatability measure (section 13 item 7)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(v)]
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    if mean == 0:
        return None
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs)) / abs(mean)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (as every table of the results)."""
    xs = sorted(values)
    if not xs:
        return None
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


@dataclass
class RunData:
    """What one run wrote, read once."""

    folder: Path
    summary: dict[str, Any]
    flows: list[dict[str, Any]] = field(default_factory=list)
    ports: list[dict[str, Any]] = field(default_factory=list)
    nic: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, folder: Path) -> RunData:
        import pyarrow.parquet as pq

        def rows(name: str) -> list[dict[str, Any]]:
            path = folder / f"{name}.parquet"
            return pq.read_table(path).to_pylist() if path.is_file() else []

        summary = json.loads((folder / "summary.json").read_text())
        return cls(folder, summary, rows("flows"), rows("ports"), rows("nic"), rows("collectives"))

    # -- the run's own facts ------------------------------------------------------------------
    @property
    def verdict(self) -> str:
        return str((self.summary.get("fidelity") or {}).get("verdict", "unknown"))

    @property
    def reasons(self) -> list[str]:
        fid = self.summary.get("fidelity") or {}
        return [*(fid.get("reasons") or []), *(f"unknown: {u}" for u in fid.get("unknown") or [])]

    @property
    def span_s(self) -> float | None:
        """The traffic's time: first flow's start to last flow's end, else the streams'."""
        job = self.summary.get("job_time_s")
        if job:
            return float(job)
        streams = self.summary.get("streams") or []
        ends = [s.get("last_rx_us") for s in streams if s.get("last_rx_us") is not None]
        starts = [s.get("first_tx_us") for s in streams if s.get("first_tx_us") is not None]
        if ends and starts:
            return (max(ends) - min(starts)) * 1e-6
        return None


def _totals(run: RunData) -> Mapping[str, Any]:
    return run.summary.get("queue_pair_totals") or {}


def _per_s(count: float | None, run: RunData) -> float | None:
    span = run.span_s
    return None if count is None or not span else count / span


def busbw_gbps(run: RunData) -> dict[str, float]:
    """Mean BusBW per collective type, Gb/s per accelerator (summary.json collectives, its
    algorithm factors those of ALGO_FACTORS)."""
    out = {}
    for ctype, stats in (run.summary.get("collectives") or {}).items():
        value = stats.get("busbw_mean_bytes_per_s")
        if value is not None:
            out[ctype] = value * 8 / 1e9
    return out


def jct_ratio(run: RunData) -> float | None:
    """Measured JCT over the roofline: the run's congestion-free plan of the same work
    (ideal_job_time_s: compute and each collective at line rate in sequence, what the draft's
    section 10.1 roofline counts)."""
    job, ideal = run.summary.get("job_time_s"), run.summary.get("ideal_job_time_s")
    return job / ideal if job and ideal else None


def ecn_marking_ratio(run: RunData) -> float | None:
    """CE-marked data packets over data packets received (the QPs' counters; else the streams'
    frames)."""
    totals = _totals(run)
    received = totals.get("data_packets_received")
    if received:
        return float(totals.get("ce_received") or 0) / received
    streams = run.summary.get("streams") or []
    frames = sum(s.get("frames_rx", 0) for s in streams)
    return sum(s.get("ce_rx", 0) for s in streams) / frames if frames else None


def retransmissions_per_s(run: RunData) -> float | None:
    return _per_s(_totals(run).get("packets_retransmitted"), run)


def out_of_order_per_s(run: RunData) -> float | None:
    reordering = run.summary.get("reordering") or {}
    count = reordering.get("reordered_packets")
    if count is None:
        count = _totals(run).get("reordered_packets")
    return _per_s(count, run)


def drops_ppm(run: RunData) -> float | None:
    """Switch drops per million data packets sent (the streams' lost frames where there are no
    QPs)."""
    totals = run.summary.get("totals") or {}
    sent = _totals(run).get("data_packets_sent")
    if sent:
        return float(totals.get("switch_drops") or 0) / sent * 1e6
    streams = run.summary.get("streams") or []
    tx = sum(s.get("frames_tx", 0) for s in streams)
    return sum(s.get("frames_lost", 0) for s in streams) / tx * 1e6 if tx else None


def pfc(run: RunData) -> tuple[float | None, float | None]:
    """(pause events per second, paused microseconds in all) over the switch ports: real PFC in
    a simulation, PFC-equivalent on the emulated fabric (ports.parquet pause_events, pause_s,
    cumulative; each port's last sample)."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for row in run.ports:
        last[(row["switch"], row["port"])] = row
    events = [r.get("pause_events") for r in last.values()]
    paused = [r.get("pause_s") for r in last.values()]
    if not last or all(e is None for e in events):
        return None, None
    count = float(sum(e or 0 for e in events))
    return _per_s(count, run), sum(p or 0 for p in paused) * 1e6


def fct_p99_us(run: RunData) -> float | None:
    fcts = [f["fct_s"] for f in run.flows if f.get("fct_s") is not None]
    p = percentile(fcts, 99)
    return None if p is None else p * 1e6


def link_balance(run: RunData, group: str = "leaf_up") -> tuple[float | None, float | None]:
    """(MMR, JFI) of the links of a tier group over the run (summary.json load_balance: link
    loads in bytes; the terminology draft's MMR by load)."""
    g = (run.summary.get("load_balance") or {}).get(group) or {}
    return g.get("mmr"), g.get("jfi")


def goodput_gbps(run: RunData) -> float | None:
    """Payload bytes the flows delivered over the traffic's time, Gb/s (retransmissions and
    headers excluded: the terminology draft's goodput)."""
    done = [f for f in run.flows if f.get("end_s") is not None]
    span = run.span_s
    if not done or not span:
        return None
    return sum(f["bytes"] for f in done) * 8 / span / 1e9


def windowed_rates(
    run: RunData, start_s: float, end_s: float, window_s: float
) -> dict[tuple[int, int, int, int], list[tuple[float, float]]]:
    """Per queue pair: its delivered rate (bit/s) over each window of `window_s` ending at
    start + window, start + 1.5 window, ... up to `end_s` (windows slide by half their length).
    A message's bytes count as delivered evenly from the later of its start and its QP's
    previous message's end to its own end, so a window is not quantized to whole messages."""
    spans: dict[tuple[int, int, int, int], list[tuple[float, float, int]]] = defaultdict(list)
    for key, flows in _by_qp(run).items():
        previous = None
        for f in flows:
            since = f["start_s"] if previous is None else max(previous, f["start_s"])
            if f["end_s"] > since:
                spans[key].append((since, f["end_s"], f["bytes"]))
            previous = f["end_s"]
    grid = []
    t = start_s + window_s
    while t <= end_s + 1e-12:
        grid.append(t)
        t += window_s / 2
    out = {}
    for key, items in spans.items():
        rates = []
        for t in grid:
            low = t - window_s
            delivered = sum(
                b * (min(e, t) - max(a, low)) / (e - a) for a, e, b in items if e > low and a < t
            )
            rates.append((t, delivered * 8 / window_s))
        out[key] = rates
    return out


def _by_qp(run: RunData) -> dict[tuple[int, int, int, int], list[dict[str, Any]]]:
    by_qp: dict[tuple[int, int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for f in run.flows:
        if f.get("end_s") is not None and f.get("start_s") is not None:
            by_qp[(f["src_rank"], f["dst_rank"], f["qp"], f["udp_sport"])].append(f)
    for flows in by_qp.values():
        flows.sort(key=lambda f: f["end_s"])
    return by_qp
