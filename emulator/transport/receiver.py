"""Receiver side of a reliable-connected queue pair: in-order acceptance, ACK/NAK, CE feedback.

The expected PSN advances only on the packet carrying it; everything it accepts is delivered
once, in order. A packet ahead of it (a gap: loss upstream) is dropped and answered by one NAK
(PSN sequence error) per out-of-sequence episode, so the sender goes back exactly once. A
packet behind it is a duplicate: dropped, and re-acknowledged when it asks for an ACK (the first
ACK may have been lost). ACKs are coalesced: only packets with AckReq get one, covering every
PSN before the expected one. PSNs further than `window_packets` either way are invalid.
Every CE-marked packet, accepted or not, goes to the DCQCN notification point, which decides
whether a CNP leaves now.

`on_data_run` takes many packets with consecutive PSNs at once (the segments of one GRO read):
when they are exactly the next ones expected, well-formed and not CE-marked it accepts them
without a descriptor per packet; anything else goes through `on_data` one packet at a time.
Either way the replies, events and state are those of `on_data` per packet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from emulator.transport.dcqcn import NotificationPoint
from emulator.transport.events import CnpSent, MessageReceived, PacketDropped, TransportEvent
from emulator.transport.packets import (
    AETH_ACK,
    AETH_NAK_PSN_SEQUENCE_ERROR,
    FIRST_OPCODES,
    LAST_OPCODES,
    PSN_MASK,
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
_FIRST = frozenset(int(op) for op in FIRST_OPCODES)
_LAST = frozenset(int(op) for op in LAST_OPCODES)


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
        self.packets_received = 0  # every data packet, in sequence or not
        self.acks_sent = 0
        self.naks_sent = 0
        self.drops: Counter[str] = Counter()
        self.deliveries: list[Delivery] | None = [] if record_deliveries else None

    @property
    def expected_psn(self) -> int:
        return self._expected_psn

    def on_data(self, *, now: float, packet: DataPacket, ce: bool) -> list[Packet]:
        """Handle one data packet; returns the ACK/NAK/CNP packets to send back."""
        out: list[Packet] = []
        self.packets_received += 1
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
                self.naks_sent += 1
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
        self.acks_sent += 1
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
                MessageReceived(
                    self.qpn, self._message_index, self._message_offset, now, self.ce_packets
                )
            )
            self._message_index += 1
            self._message_offset = 0
            self._in_message = False
        else:
            self._in_message = True
        if packet.ack_req:
            out.append(self._ack())

    def on_data_run(
        self,
        *,
        now: float,
        psn: int,
        opcodes: Sequence[int],
        ack_req_at: Sequence[int],
        payload_bytes: int,
        last_payload_bytes: int,
        ce: bool,
    ) -> list[Packet]:
        """Packets with PSNs psn, psn+1, ... and these opcodes (no RETH), AckReq on the ones at
        `ack_req_at` (ascending), each carrying payload_bytes except the last: the replies
        on_data would give for each in turn, and the same state and events."""
        count = len(opcodes)
        ends = self._run_message_ends(opcodes) if not ce and psn == self._expected_psn else None
        if ends is None or self.deliveries is not None:
            out: list[Packet] = []
            acks = set(ack_req_at)
            last = count - 1
            for i, opcode in enumerate(opcodes):
                n = last_payload_bytes if i == last else payload_bytes
                packet = DataPacket(self.qpn, (psn + i) & PSN_MASK, opcode, i in acks, n)
                out.extend(self.on_data(now=now, packet=packet, ce=ce))
            return out
        self._expected_psn = (psn + count) & PSN_MASK
        self._nak_sent = False
        self.packets_received += count
        self.acks_sent += len(ack_req_at)
        self.delivered_bytes += payload_bytes * (count - 1) + last_payload_bytes
        index = self._message_index
        offset = self._message_offset
        start = 0  # first packet not yet counted into offset
        for i in ends:
            offset += payload_bytes * (i + 1 - start)
            if i == count - 1:
                offset += last_payload_bytes - payload_bytes
            self.events.append(MessageReceived(self.qpn, index, offset, now, self.ce_packets))
            index += 1
            offset = 0
            start = i + 1
        if start < count:
            offset += payload_bytes * (count - start) + last_payload_bytes - payload_bytes
        out = []
        if ack_req_at:
            remote = self.remote_qp
            first_index = self._message_index
            e = 0
            for a in ack_req_at:
                while e < len(ends) and ends[e] <= a:
                    e += 1
                out.append(AckPacket(remote, (psn + a) & PSN_MASK, AETH_ACK, first_index + e))
        self._message_index = index
        self._message_offset = offset
        self._in_message = not ends or ends[-1] != count - 1
        return out

    def _run_message_ends(self, opcodes: Sequence[int]) -> list[int] | None:
        """Indexes of the packets that end a message, if the run is well-formed from the
        current state (None: it is not; on_data then drops what it must)."""
        count = len(opcodes)
        first = opcodes[0]
        middle = first not in _FIRST and first not in _LAST
        if self._in_message and middle and opcodes.count(first) == count:
            return []  # all middle packets: the common case, checked at C speed
        ends = []
        in_message = self._in_message
        for i, opcode in enumerate(opcodes):
            if (opcode in _FIRST) == in_message:
                return None
            in_message = opcode not in _LAST
            if not in_message:
                ends.append(i)
        return ends
