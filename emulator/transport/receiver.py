"""Receiver side of a reliable-connected queue pair: in-order acceptance, ACK/NAK, CE feedback.

The expected PSN advances only on the packet carrying it; everything it accepts is delivered
once, in order. A packet ahead of it (a gap: loss upstream) is dropped and answered by one NAK
(PSN sequence error) per out-of-sequence episode, so the sender goes back exactly once. A
packet behind it is a duplicate: dropped, and re-acknowledged when it asks for an ACK (the first
ACK may have been lost). ACKs are coalesced: only packets with AckReq get one, covering every
PSN before the expected one. PSNs further than `window_packets` either way are invalid.
Every CE-marked packet, accepted or not, goes to the DCQCN notification point, which decides
whether a CNP leaves now.
"""

from __future__ import annotations

from collections import Counter

from emulator.transport.dcqcn import NotificationPoint
from emulator.transport.events import CnpSent, MessageReceived, PacketDropped, TransportEvent
from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    FIRST_OPCODES,
    LAST_OPCODES,
    AckPacket,
    CnpPacket,
    DataPacket,
    Packet,
    psn_add,
    psn_diff,
)
from emulator.transport.params import TransportParams

# (message index, offset within the message as counted here, the packet)
Delivery = tuple[int, int, DataPacket]


class ReceiveQueuePair:
    """The responder half of an RC QP."""

    def __init__(
        self,
        *,
        qpn: int,
        remote_qp: int,
        params: TransportParams,
        initial_psn: int = 0,
        events: list[TransportEvent] | None = None,
        record_deliveries: bool = False,
    ) -> None:
        self.qpn = qpn
        self.remote_qp = remote_qp
        self.events: list[TransportEvent] = events if events is not None else []
        self.notification_point = NotificationPoint(params.dcqcn)
        self._window = params.window_packets
        self._expected_psn = initial_psn
        self._nak_sent = False
        self._in_message = False
        self._message_index = 0
        self._message_offset = 0
        self.delivered_bytes = 0
        self.ce_packets = 0
        self.cnps_sent = 0
        self.drops: Counter[str] = Counter()
        self.deliveries: list[Delivery] | None = [] if record_deliveries else None

    @property
    def expected_psn(self) -> int:
        return self._expected_psn

    def on_data(self, *, now: float, packet: DataPacket, ce: bool) -> list[Packet]:
        """Handle one data packet; returns the ACK/NAK/CNP packets to send back."""
        out: list[Packet] = []
        if ce:
            self.ce_packets += 1
            if self.notification_point.on_ce(now=now):
                out.append(CnpPacket(self.remote_qp))
                self.cnps_sent += 1
                self.events.append(CnpSent(self.qpn, now))
        ahead = psn_diff(packet.psn, self._expected_psn)
        if ahead == 0:
            self._accept(now, packet, out)
        elif 0 < ahead < self._window:
            self._drop(now, "out_of_sequence")
            if not self._nak_sent:
                self._nak_sent = True
                out.append(
                    AckPacket(
                        self.remote_qp,
                        self._expected_psn,
                        AETH_NAK_PSN_SEQUENCE_ERROR,
                        self._message_index,
                    )
                )
        elif -self._window <= ahead < 0:
            self._drop(now, "duplicate")
            if packet.ack_req:
                out.append(self._ack())
        else:
            self._drop(now, "psn_out_of_window")
        return out

    def _drop(self, now: float, reason: str) -> None:
        self.drops[reason] += 1
        self.events.append(PacketDropped(now, reason, self.qpn))

    def _ack(self) -> AckPacket:
        return AckPacket(
            self.remote_qp, psn_add(self._expected_psn, -1), AETH_ACK, self._message_index
        )

    def _accept(self, now: float, packet: DataPacket, out: list[Packet]) -> None:
        starts = packet.opcode in FIRST_OPCODES
        if starts == self._in_message:
            # FIRST/ONLY inside a message, or MIDDLE/LAST outside one: the stream is broken.
            self._drop(now, "malformed")
            return
        self._expected_psn = psn_add(self._expected_psn, 1)
        self._nak_sent = False
        n = packet.payload_bytes
        if self.deliveries is not None:
            self.deliveries.append((self._message_index, self._message_offset, packet))
        self._message_offset += n
        self.delivered_bytes += n
        if packet.opcode in LAST_OPCODES:
            self.events.append(
                MessageReceived(self.qpn, self._message_index, self._message_offset, now)
            )
            self._message_index += 1
            self._message_offset = 0
            self._in_message = False
        else:
            self._in_message = True
        if packet.ack_req:
            out.append(self._ack())
