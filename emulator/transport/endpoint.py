"""One host's transport: its queue pairs by QP number, and what to do with a received datagram.

Received packets are routed to the QP their BTH names; anything that cannot be handled (not
RoCEv2, unknown QP, a CNP for a QP that is not sending) is counted by reason and dropped, never
raised, because it comes from the network.
"""

from __future__ import annotations

from collections import Counter

from emulator.transport.events import PacketDropped, TransportEvent
from emulator.transport.packets import AckPacket, CnpPacket, DataPacket, Packet
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import MalformedPacket, decode


class RoceEndpoint:
    def __init__(self, events: list[TransportEvent] | None = None) -> None:
        self.events: list[TransportEvent] = events if events is not None else []
        self.senders: dict[int, SendQueuePair] = {}
        self.receivers: dict[int, ReceiveQueuePair] = {}
        self.drops: Counter[str] = Counter()

    def add_sender(self, qp: SendQueuePair) -> None:
        self.senders[qp.qpn] = qp

    def add_receiver(self, qp: ReceiveQueuePair) -> None:
        self.receivers[qp.qpn] = qp

    def drop_counts(self) -> Counter[str]:
        """Received packets dropped, by reason, over the endpoint and all its QPs."""
        total = Counter(self.drops)
        for sender in self.senders.values():
            total.update(sender.drops)
        for receiver in self.receivers.values():
            total.update(receiver.drops)
        return total

    def _drop(self, now: float, reason: str, qpn: int | None) -> list[Packet]:
        self.drops[reason] += 1
        self.events.append(PacketDropped(now, reason, qpn))
        return []

    def on_datagram(
        self, *, now: float, data: bytes | bytearray | memoryview, ce: bool
    ) -> list[Packet]:
        """A UDP payload from port 4791; returns the packets to send in reply."""
        try:
            packet = decode(data)
        except MalformedPacket:
            return self._drop(now, "malformed", None)
        return self.on_packet(now=now, packet=packet, ce=ce)

    def on_packet(self, *, now: float, packet: Packet, ce: bool) -> list[Packet]:
        kind = type(packet)
        if kind is DataPacket:
            assert isinstance(packet, DataPacket)
            receiver = self.receivers.get(packet.dest_qp)
            if receiver is None:
                return self._drop(now, "unknown_qpn", packet.dest_qp)
            return receiver.on_data(now=now, packet=packet, ce=ce)
        if kind is AckPacket:
            assert isinstance(packet, AckPacket)
            sender = self.senders.get(packet.dest_qp)
            if sender is None:
                return self._drop(now, "unknown_qpn", packet.dest_qp)
            sender.on_ack(now=now, packet=packet)
            return []
        if kind is CnpPacket:
            sender = self.senders.get(packet.dest_qp)
            if sender is None:
                return self._drop(now, "cnp_unknown_qp", packet.dest_qp)
            sender.on_cnp(now=now)
            return []
        return self._drop(now, "malformed", None)
