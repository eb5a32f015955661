"""Per switch-port counters, readable at any time during a run (collectors sample them).

Bytes, packets, drops and the real queue backlog come from the port's root HTB qdisc (over
rtnetlink for a run's sampler, fabrics/qdisc_stats.py, else `tc -s -j`, one process per
namespace); ECN marks and the current and peak phantom queue come from the marker (eBPF maps read through bpf(2), or RED's `marked`), with the eBPF marker's counters per
attribution class (the BTH tag the engine sets, emulator/planning/attribution.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fabrics.ecn.ebpf import ClassCounters
from fabrics.ecn.markers import MarkCounters
from fabrics.iproute import run, tc
from fabrics.netns import LiveFabric
from fabrics.qdisc_stats import QdiscStats
from fabrics.queues import LEAF_HANDLE, ROOT_HANDLE, EgressPort


@dataclass(frozen=True)
class PortCounters:
    node: str
    dev: str
    tx_bytes: int
    tx_packets: int
    drops: int
    backlog_bytes: int
    ecn_marks: int
    phantom_queue_bytes: int | None
    peak_phantom_queue_bytes: int | None
    phantom_overflows: int | None
    loss_drops: int = 0  # dropped by the loss impairment before the queue (not in `drops`)
    # A PFC fabric would have paused here: wall seconds the marker's queue spent at or above the
    # port's XOFF threshold, and how many times it crossed it (None: the marker cannot tell).
    pause_s: float | None = None
    pause_events: int | None = None
    # the marker's counters per attribution class (fabrics/ecn/phantom_marker.c; None: the
    # marker cannot tell), and the port's link rate (their byte-time's drain rate)
    by_class: tuple[ClassCounters, ...] | None = None
    rate_bps: float = 0.0


def _qdisc_stats(netns: str, qdiscs: QdiscStats | None) -> dict[str, dict[str, Any]]:
    """dev -> {"root": root qdisc stats, "leaf": leaf qdisc stats}."""
    listed = qdiscs.read(netns) if qdiscs is not None else _tc_qdiscs(netns)
    out: dict[str, dict[str, Any]] = {}
    for q in listed:
        dev = q.get("dev")
        if dev is None:
            continue
        if q.get("root") and q.get("handle") == ROOT_HANDLE:
            out.setdefault(dev, {})["root"] = q
        elif q.get("handle") == LEAF_HANDLE:
            out.setdefault(dev, {})["leaf"] = q
    return out


def _tc_qdiscs(netns: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(
        run(tc("-s", "-j", "qdisc", "show", netns=netns)) or "[]"
    )
    return result


def read_port_counters(
    live: LiveFabric, nodes: Iterable[str] | None = None, qdiscs: QdiscStats | None = None
) -> dict[tuple[str, str], PortCounters]:
    """Counters of every egress port of `nodes` (default: every switch), keyed by (node, dev);
    the qdiscs' over rtnetlink with `qdiscs` (a sampler's, read often), else from a `tc`
    process per namespace."""
    wanted = set(nodes) if nodes is not None else set(live.topology.routers)
    by_ns: dict[str, dict[str, dict[str, Any]]] = {}
    out: dict[tuple[str, str], PortCounters] = {}
    for port in live.ports:
        if port.node not in wanted:
            continue
        if port.netns not in by_ns:
            by_ns[port.netns] = _qdisc_stats(port.netns, qdiscs)
        stats = by_ns[port.netns].get(port.dev, {})
        root = stats.get("root", {})
        out[(port.node, port.dev)] = port_counters(
            port,
            live.marker.read(port, stats),
            tx_bytes=int(root.get("bytes", 0)),
            tx_packets=int(root.get("packets", 0)),
            drops=int(root.get("drops", 0)),
            backlog_bytes=int(root.get("backlog", 0)),
        )
    return out


def port_counters(
    port: EgressPort,
    marks: MarkCounters | None,
    *,
    tx_bytes: int,
    tx_packets: int,
    drops: int,
    backlog_bytes: int,
) -> PortCounters:
    """A port's counters from its queue's readings and its marker's (None: the marker cannot
    tell); shared by the emulated Clos and a user's Mininet switches (fabrics/user_mininet.py)."""
    return PortCounters(
        node=port.node,
        dev=port.dev,
        tx_bytes=tx_bytes,
        tx_packets=tx_packets,
        drops=drops,
        backlog_bytes=backlog_bytes,
        ecn_marks=marks.marks if marks else 0,
        phantom_queue_bytes=marks.queue_bytes if marks else None,
        peak_phantom_queue_bytes=marks.peak_queue_bytes if marks else None,
        phantom_overflows=marks.overflows if marks else None,
        loss_drops=marks.loss_drops if marks else 0,
        pause_s=getattr(marks, "pause_s", None) if marks else None,
        pause_events=getattr(marks, "pause_events", None) if marks else None,
        by_class=marks.by_class if marks else None,
        rate_bps=port.rate_bps,
    )
