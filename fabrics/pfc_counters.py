"""PFC frames a NIC counted, from its driver's statistics (`ethtool -S`), where it has them.

Drivers name them differently: mlx5 rx_prio3_pause, ice rx_priority_3_xoff, bnxt
rx_pfc_ena_frames_pri3, others rx_pfc_frames. A veth (the emulated fabric, a software DUT) has
none: the reading is None, and a check that needs it is not applicable rather than passed.
"""

from __future__ import annotations

import re

from emulator.errors import EmulatorError
from fabrics.iproute import Cmd, run

# a received PFC frame counter (per priority or in all), not a duration or transition count
_RX_PFC = re.compile(r"^rx_?(?:prio|priority|pfc)\S*?(?:pause|xoff|frames)\S*$")
_NOT_FRAMES = ("duration", "transition", "storm", "bytes")


def parse_rx_pfc_frames(ethtool_stats: str) -> int | None:
    """The sum of the received-PFC counters in `ethtool -S` output; None when there are none."""
    total = None
    for line in ethtool_stats.splitlines():
        name, sep, value = line.strip().partition(":")
        if not sep or not _RX_PFC.match(name) or any(w in name for w in _NOT_FRAMES):
            continue
        try:
            count = int(value.strip())
        except ValueError:
            continue
        total = (total or 0) + count
    return total


def rx_pfc_frames(ifname: str, netns: str | None) -> int | None:
    """Received PFC frames the interface counted so far; None when its driver counts none (or
    the namespace is not a named one `ethtool` can enter)."""
    if netns is not None and "/" in netns:
        return None
    try:
        out = run(Cmd("ethtool", ("-S", ifname), netns), check=False, timeout_s=10.0)
    except EmulatorError:
        return None
    return parse_rx_pfc_frames(out)
