"""Per-packet entropy: the UDP source port each packet of a queue pair carries.

With `transport.entropy: per_packet` a queue pair owns `values` source ports, consecutive from
its own (wrapping inside the IANA dynamic range 49152-65535, RFC 6335 section 6), and each
packet carries the one its PSN picks, in turn: hashing switches then spread one queue pair's
packets over their equal-cost paths, as the OCP Multipath Reliable Connection (128-256 entropy
values per queue pair) and Meta's MetaRoCE (per-path UDP source ports) do. The choice by PSN is
the plainest that spreads evenly; MRC lets the sender steer away from congested values, which
this does not model. The ICRC covers the UDP header, so each packet's is computed with its port.
"""

from __future__ import annotations

DYNAMIC_PORT_FIRST = 49152
DYNAMIC_PORTS = 65536 - DYNAMIC_PORT_FIRST


def entropy_sport(base_sport: int, psn: int, values: int) -> int:
    """The source port of the packet with this PSN, of a queue pair whose own port is
    `base_sport` (value 0, the queue pair's home port, is base_sport itself when it is in the
    dynamic range)."""
    k = psn % values
    return DYNAMIC_PORT_FIRST + (base_sport - DYNAMIC_PORT_FIRST + k) % DYNAMIC_PORTS


def home_sport(sport: int, psn: int, values: int) -> int:
    """The home port (value 0) of the queue pair whose packet with this PSN came from `sport`:
    where its ACKs, SACKs and CNPs go back from, whatever port the packet itself carried."""
    k = psn % values
    return DYNAMIC_PORT_FIRST + (sport - DYNAMIC_PORT_FIRST - k) % DYNAMIC_PORTS
