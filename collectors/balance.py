"""Link-load balance of a run: how evenly each tier's equal-cost links carried its bytes.

The switch ports fall into tier groups of equal-cost links: leaf uplinks (leaf_up: leaf to
spine), spine downlinks (spine_down: spine to leaf) and, in a three-tier fabric, spine uplinks
(spine_up: spine to super spine) and super-spine downlinks (super_spine_down: super spine to
spine). Host-facing ports belong to no group (""). Per group
two numbers judge the spread, as the IETF BMWG AI-fabric benchmark judges its flowlet and spray
procedures (draft-calabria-bmwg-ai-fabric-training-bench):

    MMR = max(x) / mean(x)                 1 when even; n when one of n links carries it all
    JFI = (sum x)^2 / (n * sum x^2)        Jain's fairness index (Jain, Chiu and Hawe, DEC
                                           TR-301, 1984): 1 when even, 1/n when one link does

over the bytes each link carried over the whole run (a link that carried nothing counts 0: an
idle uplink is exactly the imbalance ECMP leaves) and per sampling interval of ports.parquet
(delta_bytes), where intervals in which the group carried nothing are left out.

Groups are read from the port names, which are the Topology's own (fabrics.topology.build_clos:
nodes h<i>, l<i>, s<i>, c<i> by role; a switch's port toward `peer` is <switch>-<peer>, with
-<k> for parallel link k), so a results folder read back, the summary and the live exporter all
group alike without the Topology; link_groups(topology) is the same from a Topology, and the
tests hold the two equal. A port named otherwise (a DUT's) belongs to no group.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from collectors.stats import percentile_nearest_rank
from collectors.tables import rows

if TYPE_CHECKING:
    from fabrics.topology import Topology

# (sending role, receiving role) -> group, in the order reports list them
GROUPS: dict[tuple[str, str], str] = {
    ("leaf", "spine"): "leaf_up",
    ("spine", "leaf"): "spine_down",
    ("spine", "super_spine"): "spine_up",
    ("super_spine", "spine"): "super_spine_down",
}
GROUP_ORDER = tuple(GROUPS.values())
TIER_GROUP_COLUMN = "tier_group"
# build_clos's node names: role by the first letter
_ROLE_OF_PREFIX = {"h": "host", "l": "leaf", "s": "spine", "c": "super_spine"}
_NODE = re.compile(r"[hlsc]\d+")


def group_of(src_role: str, dst_role: str) -> str:
    """The tier group of a link from a `src_role` node to a `dst_role` node ("": none)."""
    return GROUPS.get((src_role, dst_role), "")


def link_groups(topology: Topology) -> dict[tuple[str, str], str]:
    """Every switch egress port of the Topology in a group: (node, interface) -> group."""
    roles = {n.name: n.role for n in topology.nodes}
    out = {}
    for key, link in topology.links.items():
        group = group_of(roles[link.src], roles[link.dst])
        if group:
            out[key] = group
    return out


def tier_group(switch: str, port: str) -> str:
    """The group of `switch`'s egress port `port` from build_clos's names ("": none)."""
    if not _NODE.fullmatch(switch) or not port.startswith(switch + "-"):
        return ""
    peer, _, k = port[len(switch) + 1 :].partition("-")
    if not _NODE.fullmatch(peer) or (k and not k.isdigit()):
        return ""
    return group_of(_ROLE_OF_PREFIX[switch[0]], _ROLE_OF_PREFIX[peer[0]])


def with_tier_groups(ports: pa.Table) -> pa.Table:
    """ports.parquet with its `tier_group` column (replaced if it has one)."""
    # one name per distinct port, spread over the rows by index (not a string per row)
    switch = pc.dictionary_encode(ports.column("switch").combine_chunks())
    port = pc.dictionary_encode(ports.column("port").combine_chunks())
    switches, port_names = switch.dictionary.to_pylist(), port.dictionary.to_pylist()
    n = max(len(port_names), 1)
    key = switch.indices.to_numpy().astype(np.int64) * n + port.indices.to_numpy()
    distinct, row_of = np.unique(key, return_inverse=True)
    names = [tier_group(switches[k // n], port_names[k % n]) for k in distinct.tolist()]
    groups = pa.array(names, pa.string()).take(pa.array(row_of.astype(np.int64)))
    if TIER_GROUP_COLUMN in ports.column_names:
        ports = ports.drop_columns([TIER_GROUP_COLUMN])
    return ports.append_column(pa.field(TIER_GROUP_COLUMN, pa.string(), nullable=False), groups)


def max_to_mean_ratio(loads: Sequence[float]) -> float | None:
    """MMR of the links' loads (BMWG AI-fabric benchmark); None without load."""
    total = sum(loads)
    if not loads or total <= 0:
        return None
    return max(loads) * len(loads) / total


def jain_fairness_index(loads: Sequence[float]) -> float | None:
    """JFI (Jain, Chiu and Hawe 1984): 1/n..1; None without load."""
    squares = sum(x * x for x in loads)
    if not loads or squares <= 0:
        return None
    return sum(loads) ** 2 / (len(loads) * squares)


def group_samples(
    ports: pa.Table,
) -> dict[str, dict[tuple[str, str], list[int]]]:
    """Per group, per link (switch, port): the delta_bytes of each of its samples in time order."""
    out: dict[str, dict[tuple[str, str], list[tuple[float, int]]]] = defaultdict(dict)
    for time_s, switch, port, delta in rows(ports, ("time_s", "switch", "port", "delta_bytes")):
        group = tier_group(switch, port)
        if group:
            out[group].setdefault((switch, port), []).append((time_s, delta))
    return {
        group: {link: [d for _, d in sorted(samples)] for link, samples in links.items()}
        for group, links in out.items()
    }


def intervals(samples: Mapping[tuple[str, str], Sequence[int]]) -> list[list[int]]:
    """The links' bytes per sampling interval, taken in step: the k-th sample of every link (the
    sampler reads all ports each round; over a cluster each server stamps its own time, so
    rounds, not timestamps, line up). Intervals some link has no sample of, and intervals in
    which the group carried nothing, are left out."""
    rounds = min((len(s) for s in samples.values()), default=0)
    out = []
    for k in range(rounds):
        loads = [s[k] for s in samples.values()]
        if sum(loads) > 0:
            out.append(loads)
    return out


def group_balance(samples: Mapping[tuple[str, str], Sequence[int]]) -> dict[str, Any]:
    """summary.json's numbers for one group (None where not measurable)."""
    per_link = [sum(s) for s in samples.values()]
    over_time = intervals(samples)
    mmrs = [m for m in map(max_to_mean_ratio, over_time) if m is not None]
    jfis = [j for j in map(jain_fairness_index, over_time) if j is not None]
    return {
        "links": len(per_link),
        "bytes": sum(per_link),
        "mmr": max_to_mean_ratio(per_link),
        "jfi": jain_fairness_index(per_link),
        # medians nearest-rank, as the summary's percentile_method
        "mmr_p50_over_time": percentile_nearest_rank(mmrs, 50),
        "mmr_max_over_time": max(mmrs, default=None),
        "jfi_p50_over_time": percentile_nearest_rank(jfis, 50),
        "jfi_min_over_time": min(jfis, default=None),
        "intervals": len(over_time),
    }


def load_balance_summary(ports: pa.Table) -> dict[str, dict[str, Any]]:
    """summary.json `load_balance`: per tier group with links, in GROUP_ORDER."""
    by_group = group_samples(ports)
    return {g: group_balance(by_group[g]) for g in GROUP_ORDER if by_group.get(g)}


def last_interval_balance(
    utilization: Mapping[tuple[str, str], float],
) -> dict[str, tuple[float, float]]:
    """Per group, (MMR, JFI) of each link's utilization over its last sampling interval (the
    live exporter's view; a group's links share one rate, so utilization stands for bytes).
    Groups that carried nothing in it are left out."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for (switch, port), value in utilization.items():
        group = tier_group(switch, port)
        if group:
            by_group[group].append(value)
    out = {}
    for group in GROUP_ORDER:
        loads = by_group.get(group, [])
        mmr, jfi = max_to_mean_ratio(loads), jain_fairness_index(loads)
        if mmr is not None and jfi is not None:
            out[group] = (mmr, jfi)
    return out
