"""IEEE 802.1Qbb priority flow control (PFC) frames, and when to send them. No I/O here.

A PFC frame is a MAC control frame: destination 01:80:C2:00:00:01, EtherType 0x8808, opcode
0x0101, a class-enable vector (bit p set: priority p is paused) and eight pause times in quanta
of 512 bit times at the link's speed, padded to the 60-byte minimum (the FCS is the NIC's).
A switch under test honours them; the emulated Linux fabric does not (README: limits).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

PFC_DESTINATION_MAC = bytes.fromhex("0180c2000001")
MAC_CONTROL_ETHERTYPE = 0x8808
PFC_OPCODE = 0x0101
MIN_FRAME_BYTES = 60  # without the FCS
QUANTUM_BITS = 512
_BODY = struct.Struct("!HH8H")


def pfc_frame(source_mac: bytes, pause_quanta: Mapping[int, int]) -> bytes:
    """One PFC frame pausing each priority in `pause_quanta` (priority 0..7 -> quanta 0..65535;
    quanta 0 resumes it at once)."""
    if len(source_mac) != 6:
        raise ValueError(f"source MAC must be 6 bytes, got {len(source_mac)}")
    times = [0] * 8
    vector = 0
    for priority, quanta in pause_quanta.items():
        if not 0 <= priority <= 7:
            raise ValueError(f"priority {priority} is not 0..7")
        if not 0 <= quanta <= 0xFFFF:
            raise ValueError(f"pause quanta {quanta} is not 0..65535")
        vector |= 1 << priority
        times[priority] = quanta
    head = PFC_DESTINATION_MAC + source_mac + struct.pack("!H", MAC_CONTROL_ETHERTYPE)
    frame = head + _BODY.pack(PFC_OPCODE, vector, *times)
    return frame + bytes(MIN_FRAME_BYTES - len(frame))


def pause_s(quanta: int, link_bps: float) -> float:
    """How long one frame pauses a priority: quanta x 512 bit times at the link's speed."""
    return quanta * QUANTUM_BITS / link_bps


def interval_for_duty_cycle(quanta: int, link_bps: float, duty_cycle: float) -> float:
    """Seconds between frames so a priority is paused `duty_cycle` (0..1] of the time."""
    if not 0 < duty_cycle <= 1:
        raise ValueError(f"duty cycle {duty_cycle} is not in (0, 1]")
    return pause_s(quanta, link_bps) / duty_cycle


class PfcSchedule:
    """When the frames of one generator are due: every `interval_s` from `start_s` until
    `stop_s` (None: no end). Times are the caller's clock (seconds)."""

    def __init__(self, interval_s: float, start_s: float = 0.0, stop_s: float | None = None):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.stop_s = stop_s
        self.next_s = start_s
        self.sent = 0

    def due(self, now_s: float) -> int:
        """How many frames are due by `now_s` (counted as sent); never more than one per call
        when behind, so a late caller does not burst what it missed."""
        if now_s < self.next_s or (self.stop_s is not None and self.next_s >= self.stop_s):
            return 0
        self.sent += 1
        following = self.next_s + self.interval_s
        # late by more than an interval: the missed frames are skipped, not sent in a burst
        self.next_s = following if following > now_s else now_s + self.interval_s
        return 1

    def wait_s(self, now_s: float) -> float | None:
        """Seconds until the next frame is due (None: no more frames)."""
        if self.stop_s is not None and self.next_s >= self.stop_s:
            return None
        return max(0.0, self.next_s - now_s)
