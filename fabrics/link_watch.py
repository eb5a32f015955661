"""Cables that went down during a run without the scenario saying so.

A veth that goes down, or whose peer does, drops what is sent to it at the interface, below the
ports' queues whose counters the drop check reads (fabrics/counters.py): the loss shows up only as
retransmissions, which alone would read as reordering. The interfaces' own counters say what
happened: `carrier_changes` counts every time a link's carrier went down or came up (net/core/
dev.c, netif_carrier_off/on and an interface set down), and `tx_dropped` the packets the interface
dropped (drivers/net/veth.c counts a packet for a peer that is not up). They are read once when
the workers are ready and once after the replay; cables that a scenario's link events take down
are left to those (emulator/backends/link_events.py), whose windows the results carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Port = tuple[str, str]  # (node, interface)


@dataclass(frozen=True)
class LinkState:
    carrier_changes: int
    tx_dropped: int


def read_links(netns: Mapping[str, str]) -> dict[Port, LinkState]:
    """Every interface of every node (node -> namespace) but loopback, over netlink
    (IFLA_CARRIER_CHANGES, which iproute2's JSON does not print)."""
    from pyroute2 import NetNS

    out: dict[Port, LinkState] = {}
    for node, ns in sorted(netns.items()):
        with NetNS(ns) as nl:
            for link in nl.get_links():
                name = link.get_attr("IFLA_IFNAME")
                if name == "lo":
                    continue
                stats = link.get_attr("IFLA_STATS64") or {}
                out[(node, name)] = LinkState(
                    int(link.get_attr("IFLA_CARRIER_CHANGES") or 0),
                    int(stats.get("tx_dropped", 0) if stats else 0),
                )
    return out


def unannounced_downs(
    before: Mapping[Port, LinkState],
    after: Mapping[Port, LinkState],
    announced: Iterable[Port] = (),
) -> str | None:
    """A fidelity reason naming the interfaces whose carrier changed between the two readings
    and are not among `announced` (the ends of the scenario's own link events), with the packets
    they dropped; None when every link stayed up."""
    skip = set(announced)
    changed = []
    dropped = 0
    for port, state in sorted(after.items()):
        old = before.get(port)
        if old is None or port in skip:
            continue
        if state.carrier_changes > old.carrier_changes:
            changed.append(f"{port[0]}:{port[1]} {state.carrier_changes - old.carrier_changes}x")
            dropped += max(state.tx_dropped - old.tx_dropped, 0)
    if not changed:
        return None
    return (
        f"links went down during the run that no link event of the scenario takes down (carrier "
        f"changes: {', '.join(changed[:6])}{', ...' if len(changed) > 6 else ''}; {dropped} "
        "packets dropped at those interfaces): the results include an outage the scenario does "
        "not have"
    )
