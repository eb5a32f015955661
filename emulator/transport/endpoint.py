"""One host's transport: its queue pairs by QP number, and what to do with a received datagram.

Received packets are routed to the QP their BTH names; anything that cannot be handled (not
RoCEv2, unknown QP, a CNP for a QP that is not sending, a packet for a QP from an address and port
that is not the QP's peer) is counted by reason and dropped, never raised, because it comes from
the network. A QP added with its peer (address, UDP port) takes packets only from that peer: a
forged CNP from elsewhere does not lower its rate, a forged ACK or NAK does not move its window.
"""

from __future__ import annotations

from collections import Counter

from emulator.transport.events import PacketDropped, TransportEvent
from emulator.transport.packets import AckPacket, CnpPacket, DataPacket, Packet, SackPacket
from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair
from emulator.transport.wire import MalformedPacket, decode

Peer = tuple[str, int]  # (IP address, UDP source port) packets of a QP must come from


class RoceEndpoint:
    def __init__(self, events: list[TransportEvent] | None = None) -> None:
        self.events: list[TransportEvent] = events if events is not None else []
        self.senders: dict[int, SendQueuePair] = {}
        self.receivers: dict[int, ReceiveQueuePair] = {}
        self.sender_peers: dict[int, Peer] = {}
        self.receiver_peers: dict[int, Peer] = {}
        self.drops: Counter[str] = Counter()

    def add_sender(self, qp: SendQueuePair, peer: Peer | None = None) -> None:
        """`peer`: where its ACKs, NAKs and CNPs come from (None: not checked)."""
        self.senders[qp.qpn] = qp
        if peer is not None:
            self.sender_peers[qp.qpn] = peer

    def add_receiver(self, qp: ReceiveQueuePair, peer: Peer | None = None) -> None:
        """`peer`: where its data comes from (None: not checked)."""
        self.receivers[qp.qpn] = qp
        if peer is not None:
            self.receiver_peers[qp.qpn] = peer

    def drop_counts(self) -> Counter[str]:
        """Received packets dropped, by reason, over the endpoint and all its QPs."""
        total = Counter(self.drops)
        for sender in self.senders.values():
            total.update(sender.drops)
        for receiver in self.receivers.values():
            total.update(receiver.drops)
        return total

    def drop(self, now: float, reason: str, qpn: int | None = None) -> list[Packet]:
        """Count a received packet as dropped (and report it as an event); nothing to send."""
        self.drops[reason] += 1
        self.events.append(PacketDropped(now, reason, qpn))
        return []

    def on_datagram(
        self,
        *,
        now: float,
        data: bytes | bytearray | memoryview,
        ce: bool,
        source: Peer | None = None,
    ) -> list[Packet]:
        """A UDP payload to port 4791 from `source`; returns the packets to send in reply."""
        try:
            packet = decode(data)
        except MalformedPacket:
            return self.drop(now, "malformed", None)
        return self.on_packet(now=now, packet=packet, ce=ce, source=source)

    def on_packet(
        self, *, now: float, packet: Packet, ce: bool, source: Peer | None = None
    ) -> list[Packet]:
        kind = type(packet)
        qpn = packet.dest_qp
        if kind is DataPacket:
            assert isinstance(packet, DataPacket)
            receiver = self.receivers.get(qpn)
            if receiver is None:
                return self.drop(now, "unknown_qpn", qpn)
            if not _from_peer(self.receiver_peers, qpn, source):
                return self.drop(now, "foreign_source", qpn)
            return receiver.on_data(now=now, packet=packet, ce=ce)
        if kind is AckPacket or kind is SackPacket:
            assert isinstance(packet, AckPacket | SackPacket)
            sender = self.senders.get(qpn)
            if sender is None:
                return self.drop(now, "unknown_qpn", qpn)
            if not _from_peer(self.sender_peers, qpn, source):
                return self.drop(now, "foreign_source", qpn)
            sender.on_ack(now=now, packet=packet)
            return []
        if kind is CnpPacket:
            sender = self.senders.get(qpn)
            if sender is None:
                return self.drop(now, "cnp_unknown_qp", qpn)
            if not _from_peer(self.sender_peers, qpn, source):
                return self.drop(now, "foreign_source", qpn)
            sender.on_cnp(now=now)
            return []
        return self.drop(now, "malformed", None)


def _from_peer(peers: dict[int, Peer], qpn: int, source: Peer | None) -> bool:
    """True when the QP has no recorded peer, or the source is not known, or they match."""
    peer = peers.get(qpn)
    return peer is None or source is None or peer == source
