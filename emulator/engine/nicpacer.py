"""A rank's NIC: its queue pairs together never transmit faster than the NIC's line rate.

Every queue pair paces itself at its congestion control's rate, which starts at line rate, so a
rank with many active queue pairs (an All-to-All has two per peer) would hand the kernel several
line rates' worth of packets. The fabric's host-port shaper would then queue them: a sender-side
queue that a real NIC does not have (its transmit arbiter serves the queue pairs in turn at line
rate), whose delay inflates round-trip times and fires retransmission timeouts. This pacer is
that arbiter's budget: the same GCRA rule as the queue pairs' own pacing (emulator/engine/
pacing.py), in wire bytes (Ethernet framing, preamble and gap included, as the link serialises
them), shared by all queue pairs of the rank; the worker serves them round robin within it.
"""

from __future__ import annotations

import math


class NicPacer:
    """GCRA over wire bytes in target time. `floor_s` bounds the credit: the caller passes
    now - burst (minus how late its tick is), as it does to every queue pair's poll_burst."""

    __slots__ = (
        "backlogged",
        "free_at_s",
        "last_served_qpn",
        "line_rate_bps",
        "lost_wire_bytes",
        "sent_wire_bytes",
    )

    def __init__(self, line_rate_bps: float) -> None:
        if line_rate_bps <= 0:
            raise ValueError("line_rate_bps must be positive")
        self.line_rate_bps = line_rate_bps
        self.free_at_s = -math.inf  # target time at which the NIC has sent all it was given
        self.sent_wire_bytes = 0
        # the arbiter's place in its round: it serves the queue pair after this one first
        self.last_served_qpn = -1
        # the last serve ended with the budget spent and queue pairs still due: line-rate bound
        self.backlogged = False
        self.lost_wire_bytes = 0.0  # credit the floor cut while backlogged (pacing deficit)

    def start_tick(self, floor_s: float) -> None:
        """A serve begins: credit the floor cuts from a NIC that was backlogged is lost."""
        if self.backlogged and self.free_at_s < floor_s:
            self.lost_wire_bytes += (floor_s - self.free_at_s) * self.line_rate_bps / 8

    def budget_bytes(self, now: float, floor_s: float) -> int:
        """Wire bytes the NIC has earned by `now` (credit back to at most floor_s), -1 while it
        still owes time for what it sent. At 0 it may send one packet, as a queue pair may send
        the packet due exactly now: GCRA's conformance test is free_at_s <= now."""
        start = self.free_at_s if self.free_at_s > floor_s else floor_s
        if start > now:
            return -1
        return int((now - start) * self.line_rate_bps / 8)

    def consume(self, floor_s: float, wire_bytes: int) -> None:
        """Account a send of `wire_bytes` (it may exceed the budget by less than a packet: the
        debt moves free_at_s past now and the next budget waits for it)."""
        start = self.free_at_s if self.free_at_s > floor_s else floor_s
        self.free_at_s = start + wire_bytes * 8 / self.line_rate_bps
        self.sent_wire_bytes += wire_bytes
