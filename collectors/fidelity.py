"""The fidelity verdict: could this machine keep up with the emulated fabric during the run?

Each check (a registry, CHECKS) looks at the recorded tables and returns a Finding: nothing
wrong, a reason the results should not be trusted as the target fabric's behaviour, or that it
had no data to judge. Table checks: packets dropped or retransmitted in a fabric the scenario
calls lossless (switch counters from the baseline the sampler reads at the replay's start), a
NIC carrying more than its emulated line rate (the shaping or the pacing does not match the
emulated rate). The backend adds its own (collectors never know which ran): engine timing and
CPU per worker, a partial run, a sampler that failed. Verdict: "degraded" with every reason;
else "unknown" when a check could not judge (a check with no data never passes); else "ok".
A backend in parts (a cluster's servers) also gets a verdict per part: the same table checks on
the rows of what that part held (its switches' ports, its ranks' NICs and flows) and the
backend's reasons for that part (its engine workers).
The machine-wide CPU (/proc/stat) is recorded for the reader but not judged: other tenants are
not the run, and what they take from it shows up as the engine's tick lateness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from collectors.summary import Fidelity, port_growth
from collectors.tables import RunTables, column, rows
from emulator.config import param


@dataclass(frozen=True)
class FidelityLimits:
    """Thresholds of the fidelity checks."""

    cpu_busy_ratio: float = param(
        0.95,
        doc="an engine worker on a CPU at least this share of the run's wall time could not keep "
        "its pacing and timers (its own process CPU, not the machine's)",
        min=0.0,
        max=1.0,
    )
    nic_overrun_ratio: float = param(
        1.05,
        doc="a NIC sample above this share of the emulated line rate means the rates disagree "
        "(sampling jitter stays within a few percent)",
        min=1.0,
    )
    lossless: bool = param(
        True, doc="the fabric is meant to be lossless (no drops, no retransmissions)"
    )
    nic_burst_bytes: int = param(
        0,
        doc="bytes a NIC may send above its rate in any window: its shaper's bucket (an HTB "
        "class lets its burst through after an idle spell)",
        min=0,
        internal=True,  # the backend's fabric says (fabric metadata shaper_burst_bytes)
    )
    reordering_by: str = param(
        "",
        doc="what in the scenario moves a flow's packets onto different paths (a switch tier "
        "spraying, flowlets, adaptive routing, per-packet entropy); empty: nothing does",
        internal=True,  # the run says, from the scenario's fabric and transport
    )


@dataclass(frozen=True)
class PartScope:
    """What one part of a backend held (a server of a cluster), and its own findings."""

    switches: frozenset[str] = frozenset()
    ranks: frozenset[int] = frozenset()
    reasons: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    reason: str | None = None  # what went wrong
    unknown: str | None = None  # why it could not be judged


OK = Finding()


def _drops(tables: RunTables, limits: FidelityLimits) -> Finding:
    if not limits.lossless:
        return OK
    growth = port_growth(tables, "drops")
    if not growth:
        return Finding(unknown="switch drops: no switch port counters were sampled")
    drops = sum(growth.values())
    if drops:
        worst = sorted(growth.items(), key=lambda kv: -kv[1])[:3]
        where = ", ".join(f"{s}:{p} {n}" for (s, p), n in worst if n)
        return Finding(
            f"switch ports dropped {drops} packets in a fabric the scenario calls lossless "
            f"({where})"
        )
    return OK


def _retransmissions(tables: RunTables, limits: FidelityLimits) -> Finding:
    if not limits.lossless:
        return OK
    retx = column(tables.flows, "retransmitted_packets")
    if not retx:
        return Finding(unknown="retransmissions: no flow was recorded")
    if sum(retx):
        return Finding(
            f"{sum(retx)} packets were retransmitted in a fabric the scenario calls lossless"
            + _reordered(tables, limits.reordering_by)
        )
    return OK


def _reordered(tables: RunTables, reordering_by: str) -> str:
    """Why, when no switch dropped anything but receivers saw gaps: the packets arrived out of
    order. With every tier on ECMP and one source port per queue pair, the emulated fabric routes
    a flow on one path and queues it FIFO at every hop (veth rings drained by NAPI, one HTB and
    FIFO per port, static neighbours), so the reordering happened on this machine outside what
    the fabric models; go-back-N took it for loss. When the scenario spreads a flow over paths
    (`reordering_by`), that is what reordered it."""
    if "sequence_errors" not in tables.queue_pairs.column_names:
        return ""
    gaps = sum(n or 0 for n in column(tables.queue_pairs, "sequence_errors"))
    if not gaps or sum(port_growth(tables, "drops").values()):
        return ""
    if reordering_by:
        return (
            f", with no drop counted at a switch port's queue: {gaps} packets arrived out of "
            f"sequence (the scenario's {reordering_by} sends a flow's packets over several "
            "paths, and a go-back-N receiver takes a reordered packet for a lost one)"
        )
    return (
        f", with no drop counted at a switch port's queue: {gaps} packets arrived out of sequence "
        "(reordered on this machine, since the fabric keeps each flow on one path and in order, "
        "or lost below the ports' queues, at a link that went down: reported apart)"
    )


# A NIC's rate is judged over NIC_WINDOW_SAMPLES consecutive samples of it. One sample of a
# busy NIC is about a hundred packets, its ends stamped within the counter reads' own time: the
# packet it ends on and the reads' jitter move it by a few percent, and the largest of tens of
# thousands of samples crosses 5% by chance (the main job at TDF 9200, 2026-11-27: 72,000
# samples, the largest 105.1% beyond the shaper's burst; over two in a row at most 102.0%, over
# three 100.7%). A shaping or pacing that runs fast does so for many samples in a row; over
# three, the ends' error is a third as large. A NIC with fewer samples is judged over those.
NIC_WINDOW_SAMPLES = 3


def _nic_overrun(tables: RunTables, limits: FidelityLimits) -> Finding:
    if not column(tables.nic, "utilization"):
        return Finding(unknown="NIC rates: no NIC sample covered an interval")
    # A shaper may pass its bucket above the rate in any window (RFC 2697's committed burst):
    # over a sample a few packets long that reads as tens of percent, and is no overrun. What
    # is left of a window once the bucket is taken out must stay within the rate.
    burst = limits.nic_burst_bytes
    series: dict[tuple[int, str], list[tuple[float, float, float, float]]] = {}
    for t, rank, direction, delta, interval, u in rows(
        tables.nic, ("time_s", "rank", "direction", "delta_bytes", "interval_s", "utilization")
    ):
        if u is not None and interval is not None and interval > 0:
            series.setdefault((rank, direction), []).append((t, float(delta), interval, u))
    peak = 0.0
    for samples in series.values():
        samples.sort()
        # the NIC's line rate in bytes per second, as its samples' utilization was computed
        rates = sorted(d / (u * i) for _, d, i, u in samples if d > 0 and u > 0)
        if not rates:
            continue
        rate = rates[len(rates) // 2]
        width = min(NIC_WINDOW_SAMPLES, len(samples))
        for k in range(len(samples) - width + 1):
            window = samples[k : k + width]
            sent = sum(d for _, d, _, _ in window)
            capacity = sum(i for _, _, i, _ in window) * rate
            peak = max(peak, max(sent - burst, 0.0) / capacity)
    if peak > limits.nic_overrun_ratio:
        allowed = f" beyond its shaper's {burst}-byte burst" if burst else ""
        return Finding(
            f"a NIC carried {peak:.0%} of its emulated line rate{allowed} (over up to "
            f"{NIC_WINDOW_SAMPLES} samples in a row): the fabric's shaping or the pacing does "
            "not match the emulated rate"
        )
    return OK


# Check name -> check.
CHECKS: dict[str, Callable[[RunTables, FidelityLimits], Finding]] = {
    "drops_in_lossless_fabric": _drops,
    "retransmissions_in_lossless_fabric": _retransmissions,
    "nic_over_line_rate": _nic_overrun,
}


def _rows_of(table: pa.Table, name: str, values: Iterable[str] | Iterable[int]) -> pa.Table:
    if table.num_rows == 0 or name not in table.column_names:
        return table
    kind = table.schema.field(name).type
    return table.filter(pc.is_in(table[name], value_set=pa.array(sorted(values), type=kind)))


def _held_by(tables: RunTables, part: PartScope) -> RunTables:
    """The rows of what one part held: its switches' ports, its ranks' NICs and the flows its
    ranks send (a flow's retransmissions are its sender's)."""
    return replace(
        tables,
        ports=_rows_of(tables.ports, "switch", part.switches),
        nic=_rows_of(tables.nic, "rank", part.ranks),
        flows=_rows_of(tables.flows, "src_rank", part.ranks),
    )


def _judged(
    tables: RunTables,
    limits: FidelityLimits,
    skip: set[str],
    extra_reasons: Iterable[str],
    extra_unknown: Iterable[str],
) -> tuple[list[str], list[str]]:
    findings = [check(tables, limits) for name, check in CHECKS.items() if name not in skip]
    reasons = [f.reason for f in findings if f.reason is not None] + list(extra_reasons)
    unknown = [f.unknown for f in findings if f.unknown is not None] + list(extra_unknown)
    return reasons, unknown


def _verdict(reasons: list[str], unknown: list[str]) -> Literal["ok", "degraded", "unknown"]:
    return "degraded" if reasons else "unknown" if unknown else "ok"


def assess_fidelity(
    tables: RunTables,
    limits: FidelityLimits = FidelityLimits(),
    extra_reasons: Iterable[str] = (),
    extra_unknown: Iterable[str] = (),
    not_applicable: Iterable[str] = (),
    leaves_out: Iterable[str] = (),
    parts: Mapping[str, PartScope] | None = None,
) -> Fidelity:
    """Every check's finding, plus the backend's own reasons and unknowns; `not_applicable`
    names checks the backend has no such data for by design (a DUT's switch is not ours);
    `parts`: what each part of the backend held, judged the same way on its own rows."""
    skip = set(not_applicable)
    reasons, unknown = _judged(tables, limits, skip, extra_reasons, extra_unknown)
    by_part = {}
    for name, part in (parts or {}).items():
        held = _held_by(tables, part)
        # a part without switches (a DUT's server) has no switch counters to judge
        part_skip = skip | ({"drops_in_lossless_fabric"} if not part.switches else set())
        r, u = _judged(held, limits, part_skip, part.reasons, part.unknown)
        by_part[name] = Fidelity(_verdict(r, u), tuple(r), tuple(u))
    return Fidelity(
        _verdict(reasons, unknown), tuple(reasons), tuple(unknown), tuple(leaves_out), by_part
    )
