"""Per-queue-pair pacing as a token bucket, and cutting what it releases into GSO batches.

The sender queue pair spaces its packets at the congestion control's current rate: it says when
its next packet is due (`next_transmit_s`) and advances that by the packet's wire time each time
one is taken. The engine only wakes up once per tick (about 1 ms), so at each tick it takes every
packet due by now, handing the queue pair the packet's own due time as `now`: this is the virtual
scheduling form of a token bucket (GCRA, ITU-T I.371), refilled from the clock at every tick and
exact at any rate change in between. `floor_s` bounds the bucket: a queue pair that was idle or
held up never sends more than (now - floor_s) of credit in one go, so over any window of a few
ticks the rate stays at the controller's current rate.

The worker takes these packets with `SendQueuePair.poll_burst(now=now, floor_s=floor_s, ...)`,
one GSO buffer's worth at a time in compact form; `take_due` and `gso_batches` are the same
rule one descriptor per packet (the reference the burst path is tested against).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from emulator.transport.packets import DataPacket
from emulator.transport.sender import GSO_MAX_BUFFER_BYTES

__all__ = ["GSO_MAX_BUFFER_BYTES", "PacedSender", "gso_batches", "take_due"]


class PacedSender(Protocol):
    def next_transmit_s(self) -> float | None: ...
    def poll_transmit(self, *, now: float) -> DataPacket | None: ...


def take_due(
    sender: PacedSender, *, now: float, floor_s: float, max_packets: int
) -> list[DataPacket]:
    """Every packet of `sender` due by `now`, each taken at its own due time (not before floor_s)."""
    out: list[DataPacket] = []
    nxt = sender.next_transmit_s
    poll = sender.poll_transmit
    while len(out) < max_packets:
        due = nxt()
        if due is None or due > now:
            break
        packet = poll(now=due if due > floor_s else floor_s)
        if packet is None:
            break
        out.append(packet)
    return out


def gso_batches(
    packets: Sequence[DataPacket], max_segments: int, max_bytes: int = GSO_MAX_BUFFER_BYTES
) -> list[Sequence[DataPacket]]:
    """Cut packets (in order) into runs one GSO send can carry: every packet of a run has the
    size of its first except the last, which may be shorter; at most max_segments and max_bytes."""
    batches: list[Sequence[DataPacket]] = []
    start = 0
    n = len(packets)
    while start < n:
        size = packets[start].udp_payload_bytes
        limit = min(max_segments, max(1, max_bytes // size))
        end = start + 1
        while end < n and end - start < limit:
            s = packets[end].udp_payload_bytes
            if s > size:
                break
            end += 1
            if s < size:
                break
        batches.append(packets[start:end])
        start = end
    return batches
