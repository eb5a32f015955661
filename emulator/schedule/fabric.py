"""Path functions for the ideal model: ranks -> links of the scenario's fabric.

A Clos comes from fabrics.topology (same ECMP model as the fabric backends; rank r is host r);
a DUT fabric is modelled as a non-blocking switch with each rank's link capped at max_rate_gbps.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any

from emulator.errors import PlanError
from emulator.schedule.fluid import PathFn

DEFAULT_LINK_GBPS = 100.0
_MAX_HOSTS_PER_LEAF = 8


def default_clos_spec(ranks: int, link_gbps: float = DEFAULT_LINK_GBPS) -> Any:
    """A non-blocking two-tier Clos with at least `ranks` hosts: up to 8 hosts per leaf (at least
    two leaves when ranks > 1) and as many spines as hosts per leaf, every link link_gbps."""
    from fabrics.spec import ClosSpec

    hosts_per_leaf = max(1, min(_MAX_HOSTS_PER_LEAF, math.ceil(ranks / 2)))
    leaves = max(1, math.ceil(ranks / hosts_per_leaf))
    return ClosSpec(
        hosts_per_leaf=hosts_per_leaf,
        leaves=leaves,
        spines=hosts_per_leaf,
        host_link_gbps=link_gbps,
        fabric_link_gbps=link_gbps,
    )


def clos_path(spec: Any, ranks: int) -> PathFn:
    from fabrics.topology import shared_clos

    topology = shared_clos(spec)
    hosts = topology.hosts
    if len(hosts) < ranks:
        raise PlanError(
            f"fabric: the Clos has {len(hosts)} hosts but the trace has {ranks} ranks "
            "(raise hosts_per_leaf, leaves or pods)"
        )

    def path(src: int, dst: int, sport: int) -> Sequence[tuple[Hashable, float]]:
        # a probe (balanced source ports try many): the topology need not keep its hashes
        links = topology.path(hosts[src], hosts[dst], sport, remember=False)
        return [(link.name, link.rate_bps) for link in links]

    return path


def star_path(rate_bps: float, ranks_per_port: int = 1) -> PathFn:
    """Each port's uplink and downlink at rate_bps through an ideal switch; ranks 0..n-1
    share the first port, n..2n-1 the next (n = ranks_per_port). Ranks on one port reach each
    other without the switch (the port's namespace delivers locally): no link."""

    def path(src: int, dst: int, sport: int) -> Sequence[tuple[Hashable, float]]:
        del sport
        a, b = src // ranks_per_port, dst // ranks_per_port
        if a == b:
            return []
        return [(("up", a), rate_bps), (("down", b), rate_bps)]

    return path


def path_for_fabric(fabric: Any, ranks: int) -> PathFn:
    from fabrics.spec import ClosSpec, DutSpec, MininetSpec

    if isinstance(fabric, ClosSpec):
        return clos_path(fabric, ranks)
    if isinstance(fabric, DutSpec):
        if fabric.rank_count < ranks:
            raise PlanError(f"fabric: {fabric.rank_count} DUT ranks for {ranks} ranks")
        return star_path(fabric.rank_rate_bps, fabric.ranks_per_interface)
    if isinstance(fabric, MininetSpec):
        # a user's network: its topology is theirs; ideal times as through one ideal switch
        if fabric.ranks < ranks:
            raise PlanError(f"fabric: {fabric.ranks} Mininet hosts for {ranks} ranks")
        return star_path(fabric.rank_rate_bps, 1)
    raise PlanError(f"fabric: no ideal-time model for {type(fabric).__name__}")


def describe_fabric(fabric: Any) -> str:
    """One line naming the fabric the ideal times were computed on."""
    from fabrics.spec import ClosSpec, DutSpec, MininetSpec

    if isinstance(fabric, MininetSpec):
        return (
            f"Mininet network: {fabric.ranks} hosts ({', '.join(fabric.hosts[:4])}"
            f"{', ...' if fabric.ranks > 4 else ''}), NICs {fabric.host_link_gbps:g} Gb/s; "
            "ideal times through one ideal switch"
        )

    if isinstance(fabric, ClosSpec):
        tiers = (
            f"{fabric.pods} pods, {fabric.super_spines} super spines, " if fabric.pods > 1 else ""
        )
        return (
            f"Clos: {tiers}{fabric.leaves} leaves x {fabric.hosts_per_leaf} hosts, "
            f"{fabric.spines} spines, host links {fabric.host_link_gbps:g} Gb/s, fabric links "
            f"{fabric.fabric_link_gbps:g} Gb/s"
        )
    if isinstance(fabric, DutSpec):
        shared = (
            f", {fabric.ranks_per_interface} ranks per port"
            if fabric.ranks_per_interface > 1
            else ""
        )
        return (
            f"DUT: ideal switch, {len(fabric.interfaces)} ports at "
            f"{fabric.max_rate_gbps:g} Gb/s{shared}"
        )
    return type(fabric).__name__
