"""Who throttled whom: each switch port's queue, traffic, ECN marks and drops by collective.

Two backends can tell whose packet is whose:

- the simulator, exactly: every frame carries its flow and collective instance. It sends
  PortAttribution samples: per port and sample window, each instance's bytes in the queue at the
  window's end, its queue byte-time in the window (its queued bytes integrated over the window:
  each of its frames' size times its wait, exact), its bytes sent, marks and drops in the
  window, every marked packet's flow, and how long PFC paused the port in the window, charged
  to the instances by their share of the queue's byte-time (pause_s);
- the emulated fabric, by class: the engine writes an attribution class (a collective type,
  emulator/planning/attribution.py) into the 6 reserved bits of every data packet's BTH, and each
  switch port's eBPF marker counts per class (PortClassSample, cumulative): bytes, packets, ECN
  marks, overflows, the phantom queue's byte-time (each packet's bytes x its time in the FIFO,
  charged when it arrives: exact for the marker's queue, a window's share shifted by at most the
  queueing delay) and the time above XOFF charged to the class whose arrival kept the queue
  there. Rows are per class (collective_id -1): which instance is not on the wire, so
  instance-level attribution (and marks.parquet's per-flow marks) stays the simulator's.

Two tables come of it:

- attribution.parquet: per port, sample window and collective instance (simulated) or class
  (emulated), the queue bytes it held at the window's end (simulated) or on average over the
  window (emulated, with the measured `queue_byte_s`), and the bytes, marks and drops of the
  window (rows only where it had any); `source` says which;
- marks.parquet: every ECN mark, with the port, time, flow and collective it hit (simulated).

The summary's `attribution` section reads them: per congested port (the most queue byte-time),
each collective type's share of the queue, the marks and the drops, and the top interferer; the
CNPs each type's packets drew (the flows' CNPs, sent for marked packets of that flow); the
reconciliation of the switches' marks with the receivers' CE counts per type; and (simulated)
for the All-to-All flows in the slowest 1%, where their packets were marked and which collective
types held those queues in the windows of the marks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from collectors.columns import RecordColumns, rows
from emulator.events import PortAttribution, PortClassSample

TOP_PORTS = 4  # ports the summary and the plot describe, most queue byte-time first
SLOW_SHARE = 0.01  # the slowest 1% of All-to-All flows (at least one)
NOT_MEASURED = (
    "not measured on this backend: the simulator tags every packet with its collective "
    "(--backend sim, or --reference sim beside an emulated run), the emulated fabric counts "
    "by collective type with its eBPF marker (run.backend: netns, marker ebpf or auto)"
)
SIMULATED = "simulated"
EMULATED = "emulated"
SOURCES = {
    SIMULATED: "simulated: exact (every frame carries its flow and collective instance)",
    EMULATED: (
        "emulated: eBPF per-class counters at each switch port (the class the engine writes in "
        "the BTH reserved bits), estimated queue share (each packet's bytes x its time in the "
        "phantom FIFO, charged when it arrives)"
    ),
}
INSTANCE_LEVEL_SIM_ONLY = (
    "per class (collective type) only: 6 BTH bits carry a class, not an instance; which "
    "instance held a queue, and which flow each mark hit, stay the simulator's (--reference sim)"
)
OTHER_NAME = (
    "OTHER"  # the class several collective types share beyond 63 (emulator.planning.attribution)
)


@dataclass(frozen=True, slots=True)
class AttributionRow:
    time_s: float  # the window's end
    interval_s: float
    switch: str
    port: str
    collective_id: int
    collective_type: str
    queue_bytes: int  # held at the window's end (simulated); its mean over the window (emulated)
    tx_bytes: int  # sent in the window
    ecn_marks: int
    drops: int
    # queue byte-time (target byte-seconds: the queued bytes integrated over the window), exact
    # per instance in simulation, per class from the marker's phantom FIFO when emulated;
    # emulated (per class, collective_id -1): the class's packets, time at or above XOFF
    # charged to it and its rises to XOFF, and the class number (emulator.planning.attribution);
    # simulated: pause_s is the port's PFC-paused time in the window times the instance's
    # share of the queue's byte-time
    packets: int | None = None
    queue_byte_s: float | None = None
    pause_s: float | None = None
    pause_events: int | None = None
    attribution_class: int | None = None
    source: str = SIMULATED
    job: str = ""  # the instance's job (several jobs on one fabric; emulated: the class's job)


@dataclass(frozen=True, slots=True)
class MarkRow:
    time_s: float  # the end of the sample window it fell in
    switch: str
    port: str
    flow_id: int
    collective_id: int
    collective_type: str
    job: str = ""


class PortShare(NamedTuple):
    """What a window row adds to the live per-port, per-collective-type totals
    (collectors.live.LiveMetrics.add_attribution)."""

    switch: str
    port: str
    collective_type: str
    job: str
    tx_bytes: int
    ecn_marks: int
    queue_byte_s: float | None
    pause_s: float | None


def share_of(row: AttributionRow) -> PortShare:
    return PortShare(
        row.switch,
        row.port,
        row.collective_type,
        row.job,
        row.tx_bytes,
        row.ecn_marks,
        row.queue_byte_s,
        row.pause_s,
    )


class AttributionTable:
    """Turns PortAttribution samples, and the differences between PortClassSample readings,
    into window rows."""

    def __init__(self) -> None:
        # as columns: a large simulated run has hundreds of thousands of windows
        # (collectors.columns)
        self.row_columns: RecordColumns[AttributionRow] = RecordColumns(AttributionRow)
        self.mark_columns: RecordColumns[MarkRow] = RecordColumns(MarkRow)
        self.measured = False
        # per port: the time of its last class reading and each class's counters then
        self._last: dict[tuple[str, str], tuple[float, dict[int, tuple[Any, ...]]]] = {}

    @property
    def rows(self) -> list[AttributionRow]:
        return self.row_columns.rows()

    @property
    def marks(self) -> list[MarkRow]:
        return self.mark_columns.rows()

    def add_classes(self, event: PortClassSample) -> list[PortShare]:
        """A port's cumulative per-class counters: the first reading of a port is its baseline
        (no row); each later one adds a row per class with something in the window since. A
        counter that went backwards was reset (the marker re-attached): its value is the
        window's. Returns what the rows added add to the live totals."""
        self.measured = True
        key = (event.switch, event.port)
        now = {
            c.attribution_class: (
                c.bytes,
                c.packets,
                c.ecn_marks,
                c.drops,
                c.queue_byte_s,
                c.pause_s or 0.0,
                c.pause_events or 0,
            )
            for c in event.by_class
        }
        last = self._last.get(key)
        self._last[key] = (event.time_s, now)
        added: list[AttributionRow] = []
        if last is None or event.time_s <= last[0]:
            return []
        interval = event.time_s - last[0]
        for c in event.by_class:
            values = now[c.attribution_class]
            before = last[1].get(c.attribution_class)
            if before is None or values[1] < before[1]:
                before = (0, 0, 0, 0, 0.0, 0.0, 0)
            d = [v - b for v, b in zip(values, before, strict=True)]
            if not d[1] and not d[5]:
                continue  # no packet and no time above XOFF in the window
            # with several jobs a class is one job's type, named job/TYPE
            job, _, ctype = c.name.rpartition("/")
            added.append(
                AttributionRow(
                    event.time_s,
                    interval,
                    event.switch,
                    event.port,
                    -1,
                    ctype,
                    round(d[4] / interval),
                    int(d[0]),
                    int(d[2]),
                    int(d[3]),
                    packets=int(d[1]),
                    queue_byte_s=max(0.0, d[4]),
                    pause_s=max(0.0, d[5]) if c.pause_s is not None else None,
                    pause_events=int(d[6]) if c.pause_events is not None else None,
                    attribution_class=c.attribution_class,
                    source=EMULATED,
                    job=job,
                )
            )
        self.row_columns.extend(added)
        return [share_of(row) for row in added]

    def add(
        self,
        event: PortAttribution,
        type_of: Callable[[int], str],
        instance_of: Callable[[int], int],
        job_of: Callable[[int], str] = lambda instance: "",
    ) -> list[PortShare]:
        """A simulated port's window: a row per instance, a mark row per marked packet, given to
        the columns as values with no row built (a run has one per port, window and instance,
        and one per mark). Returns what each instance's row adds to the live totals."""
        self.measured = True
        shares: list[PortShare] = []
        t, interval, switch, port = event.time_s, event.interval_s, event.switch, event.port
        by = event.by_instance
        if by:
            # PFC held the port's queue for paused_s of the window: charged to the instances by
            # their share of the queue's byte-time in the window
            held = sum(e[5] for e in by)
            paused = event.paused_s
            append = self.row_columns.append_values
            for instance, queued, tx, marks, drops, byte_s in by:
                ctype, job = type_of(instance), job_of(instance)
                pause = paused * byte_s / held if held and paused > 0 else None
                # AttributionRow's fields in order (tests/unit/test_columns.py holds it)
                append(
                    (
                        t,
                        interval,
                        switch,
                        port,
                        instance,
                        ctype,
                        queued,
                        tx,
                        marks,
                        drops,
                        None,
                        byte_s,
                        pause,
                        None,
                        None,
                        SIMULATED,
                        job,
                    )
                )
                shares.append(PortShare(switch, port, ctype, job, tx, marks, byte_s, pause))
        if event.marked_flows:
            append = self.mark_columns.append_values
            for flow_id in event.marked_flows:
                instance = instance_of(flow_id)
                # MarkRow's fields in order
                append((t, switch, port, flow_id, instance, type_of(instance), job_of(instance)))
        return shares


def port_shares(attribution: pa.Table) -> dict[tuple[str, str], dict[str, Any]]:
    """Per port: queue byte-seconds, bytes, marks and drops by collective type."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    names = ("switch", "port", "collective_type", "queue_bytes", "interval_s", "tx_bytes")
    more = ("ecn_marks", "drops", "queue_byte_s", "pause_s")
    counted = ("queue_byte_s", "tx_bytes", "ecn_marks", "drops", "pause_s")
    for sw, port, kind, queued, interval, tx, marks, drops, byte_s, pause_s in rows(
        attribution, names + more
    ):
        p = out.setdefault((sw, port), {k: defaultdict(float) for k in counted})
        # measured byte-time (emulated), or what the queue held at the window's end x the window
        p["queue_byte_s"][kind] += byte_s if byte_s is not None else queued * interval
        p["tx_bytes"][kind] += tx
        p["ecn_marks"][kind] += marks
        p["drops"][kind] += drops
        if pause_s:
            p["pause_s"][kind] += pause_s
    return out


def job_queue_shares(attribution: pa.Table) -> dict[tuple[str, str], dict[str, float]]:
    """Per port, queue byte-seconds by job, when the rows name two or more jobs (several jobs
    on one fabric; emulated, a class is then one job's collective type)."""
    if "job" not in attribution.column_names:
        return {}
    if len({j for j in attribution.column("job").to_pylist() if j}) < 2:
        return {}
    out: dict[tuple[str, str], dict[str, float]] = {}
    for sw, port, job, queued, interval, byte_s in rows(
        attribution, ("switch", "port", "job", "queue_bytes", "interval_s", "queue_byte_s")
    ):
        if job:
            held = byte_s if byte_s is not None else queued * interval
            by_job = out.setdefault((sw, port), defaultdict(float))
            by_job[job] += held
    return out


def _share(counts: dict[str, float]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items())} if total else {}


def congested_ports(
    attribution: pa.Table,
    top: int = TOP_PORTS,
    shares: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> list[tuple[str, str]]:
    """The ports with queue byte-time, most first (`shares`: port_shares of the table)."""
    if shares is None:
        shares = port_shares(attribution)
    ranked = sorted(shares, key=lambda k: -sum(shares[k]["queue_byte_s"].values()))
    return [k for k in ranked if sum(shares[k]["queue_byte_s"].values()) > 0][:top]


def source_of(attribution: pa.Table) -> str:
    """EMULATED when the rows are the eBPF marker's per-class counts, else SIMULATED (older
    folders have no `source` column: only the simulator wrote them)."""
    if (
        "source" in attribution.column_names
        and EMULATED in attribution.column("source").to_pylist()
    ):
        return EMULATED
    return SIMULATED


def attribution_summary(
    attribution: pa.Table, marks: pa.Table, flows: pa.Table, measured: bool
) -> dict[str, Any]:
    """The summary's `attribution` section (see the module's docstring)."""
    if not measured:
        return {"measured": False, "why": NOT_MEASURED}
    source = source_of(attribution)
    shares = port_shares(attribution)
    jobs = job_queue_shares(attribution)
    ports = []
    for key in congested_ports(attribution, top=len(shares), shares=shares):
        p = shares[key]
        queue = _share(p["queue_byte_s"])
        port: dict[str, Any] = {
            "switch": key[0],
            "port": key[1],
            "queue_byte_s": sum(p["queue_byte_s"].values()),
            "queue_share": queue,
            "tx_share": _share(p["tx_bytes"]),
            "ecn_marks": {k: int(v) for k, v in sorted(p["ecn_marks"].items()) if v},
            "drops": {k: int(v) for k, v in sorted(p["drops"].items()) if v},
            "top_interferer": max(queue, key=lambda k: queue[k]) if queue else None,
        }
        if p["pause_s"]:
            # emulated: the time above XOFF each class's arrivals kept the queue there;
            # simulated: the time PFC paused the port, shared by what it held
            name = "above_xoff_s" if source == EMULATED else "paused_s"
            port[name] = {k: v for k, v in sorted(p["pause_s"].items()) if v}
        by_job = jobs.get(key)
        if by_job:
            share = _share(by_job)
            port["queue_share_by_job"] = share
            port["top_interfering_job"] = max(share, key=lambda k: share[k]) if share else None
        ports.append(port)
    cnps: dict[str, int] = defaultdict(int)
    for kind, sent in rows(flows, ("collective_type", "cnps_sent")):
        cnps[kind] += int(sent or 0)
    out: dict[str, Any] = {
        "measured": True,
        "source": SOURCES[source],
        "ports": ports[:TOP_PORTS],
        "ports_with_queue": len(ports),
        "cnps_by_marked_collective": dict(sorted(cnps.items())),
        "marks_reconciled": reconcile_marks(attribution, flows),
    }
    if source == EMULATED:
        out["granularity"] = INSTANCE_LEVEL_SIM_ONLY
    else:
        out["slowest_all_to_all"] = slow_flow_marks(attribution, marks, flows)
    return out


def reconcile_marks(attribution: pa.Table, flows: pa.Table) -> dict[str, Any]:
    """Per collective type (class): the ECN marks the switches counted (every hop: a packet
    marked at two ports counts twice) against the CE-marked packets its flows' receivers
    counted (once per packet). The receivers can only count fewer or as many; more is a
    discrepancy (a packet the switches did not see marked, or counted under another class).
    Marks on untagged packets (ACKs, CNPs, other traffic) have no receiver count."""
    switch: dict[str, int] = defaultdict(int)
    for kind, marks in rows(attribution, ("collective_type", "ecn_marks")):
        switch[kind] += int(marks)
    receiver: dict[str, int] = defaultdict(int)
    for kind, ce in rows(flows, ("collective_type", "ce_marks")):
        receiver[class_of_type(kind, switch)] += int(ce or 0)
    by_type = {}
    discrepancies = []
    for kind in sorted(set(switch) | set(receiver)):
        s, r = switch.get(kind, 0), receiver.get(kind, 0)
        by_type[kind] = {"switch_marks": s, "receiver_ce": r, "marked_again_or_lost": s - r}
        if r > s:
            discrepancies.append(
                f"{kind}: its receivers counted {r} CE-marked packets, the switches marked {s}"
            )
    return {
        "by_type": by_type,
        "switch_marks": sum(switch.values()),
        "receiver_ce": sum(receiver.values()),
        "holds": not discrepancies,
        "discrepancies": discrepancies,
    }


def class_of_type(kind: str, classes: Iterable[str]) -> str:
    """The class a flow of collective type `kind` was counted under at the switches: its own
    type, or OTHER when the run had more types than classes (emulator.planning.attribution keys
    classes by collective type; this is its inverse over the names the rows carry)."""
    names = set(classes)
    if kind in names or OTHER_NAME not in names:
        return kind
    return OTHER_NAME


def slow_flow_marks(
    attribution: pa.Table, marks: pa.Table, flows: pa.Table, kind: str = "ALL_TO_ALL"
) -> list[dict[str, Any]]:
    """For the slowest 1% of `kind` flows: the ports where their packets were marked, and the
    share of those ports' queue byte-time each collective type held in the windows of the
    marks (a queue that drains within a window still counts: the byte-time, not a snapshot)."""
    done = [
        (fct, fid)
        for fid, k, fct in rows(flows, ("flow_id", "collective_type", "fct_s"))
        if k == kind and fct is not None
    ]
    if not done:
        return []
    done.sort(reverse=True)
    slow = done[: max(1, round(len(done) * SLOW_SHARE))]
    wanted = {fid for _, fid in slow}
    by_flow: dict[int, list[tuple[float, str, str]]] = defaultdict(list)
    for t, sw, port, fid in rows(marks, ("time_s", "switch", "port", "flow_id")):
        if fid in wanted:
            by_flow[fid].append((t, sw, port))
    # the queues of the windows those marks fell in only (every window of a large run, as
    # dictionaries, was tens of MB)
    windows = {w for marked in by_flow.values() for w in marked}
    held: dict[tuple[float, str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    names = ("time_s", "switch", "port", "collective_type", "queue_bytes", "interval_s")
    for t, sw, port, ckind, queued, interval, byte_s in rows(attribution, (*names, "queue_byte_s")):
        if (t, sw, port) in windows:
            held[(t, sw, port)][ckind] += byte_s if byte_s is not None else queued * interval
    out = []
    for fct, fid in slow:
        at: dict[str, dict[str, Any]] = {}
        for t, sw, port in by_flow.get(fid, []):
            entry = at.setdefault(f"{sw}:{port}", {"marks": 0, "queue": defaultdict(float)})
            entry["marks"] += 1
            for ckind, queued in held.get((t, sw, port), {}).items():
                entry["queue"][ckind] += queued
        out.append(
            {
                "flow_id": fid,
                "fct_s": fct,
                "marked_at": {
                    name: {"marks": e["marks"], "queue_share": _share(e["queue"])}
                    for name, e in sorted(at.items(), key=lambda kv: -kv[1]["marks"])
                },
            }
        )
    return out


__all__ = [
    "EMULATED",
    "NOT_MEASURED",
    "SIMULATED",
    "SOURCES",
    "AttributionRow",
    "AttributionTable",
    "MarkRow",
    "attribution_summary",
    "class_of_type",
    "congested_ports",
    "port_shares",
    "reconcile_marks",
    "slow_flow_marks",
    "source_of",
]
