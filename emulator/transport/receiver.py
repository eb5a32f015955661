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

With `reliability: selective` a packet ahead of the expected PSN (within the window) is held,
not dropped (its data placed, as a NIC with out-of-order placement does: MRC, Spectrum-X): a
bitmap relative to the expected PSN says which are held. When the gap fills, the held packets
are taken in order, so messages still complete in order and once. The response to a packet
with AckReq (or to one that opened a gap) is an ACK while nothing is held, else a SACK: the
cumulative PSN and the bitmap (SackPacket). No NAK is sent for a gap: the requester decides
what is lost from the SACKs (emulator.transport.sender).

Reordering is counted in both modes as RFC 4737 (section 4.1.1) defines it: a packet is
reordered when it arrives after one with a higher PSN; its extent is how far below the highest
PSN seen so far it is. Nothing on the wire marks a resend, so the resend of a lost packet counts
as reordered too (a go-back-N responder leaves out the resends of packets it saw and dropped):
on a lossless fabric the count is the network's reordering, with loss it is at most the lost
packets more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

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
    SackPacket,
    psn_add,
    psn_diff,
    sack_words,
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
        self._deliveries: list[Delivery] | None = [] if record_deliveries else None
        # told when delivery recording is switched on or off (a common path taken elsewhere
        # must hand every packet back while it records: emulator/sim/native_rqp.py)
        self.on_recording: Callable[[], None] | None = None
        self._selective = params.reliability == "selective"
        # selective: bit i set = PSN expected + i is held (bit 0 never: that is the gap)
        self._held = 0
        self._held_packets: dict[int, DataPacket] = {}
        self.sacks_sent = 0
        self.held_packets = 0  # accepted out of order (selective)
        # RFC 4737 reordering: the highest PSN seen; go-back-N: PSNs seen ahead of the expected
        # one and dropped (their resends are not reordered arrivals)
        self._highest_psn = psn_add(initial_psn, -1)
        self._seen_ahead: set[int] = set()
        self.reordered_packets = 0
        self.reorder_extent_sum = 0
        self.reorder_extent_max = 0

    @property
    def expected_psn(self) -> int:
        return self._expected_psn

    @property
    def deliveries(self) -> list[Delivery] | None:
        """Every accepted packet from when recording began (None: not recording)."""
        return self._deliveries

    @deliveries.setter
    def deliveries(self, record: list[Delivery] | None) -> None:
        self._deliveries = record
        if self.on_recording is not None:
            self.on_recording()

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
        psn = packet.psn
        if psn == self._expected_psn and not self._held and not self._seen_ahead:
            # the common case, the same in both reliabilities: the next packet, nothing held
            if psn == (self._highest_psn + 1) & PSN_MASK or psn_diff(psn, self._highest_psn) > 0:
                self._highest_psn = psn
            else:
                self._reordered(psn_diff(self._highest_psn, psn))
            self._accept(now, packet, out)
            return out
        ahead = psn_diff(psn, self._expected_psn)
        beyond = psn_diff(psn, self._highest_psn)
        if beyond > 0:
            self._highest_psn = packet.psn
        elif (
            beyond < 0
            and ahead >= 0
            and packet.psn not in self._seen_ahead
            and not (self._selective and self._held >> ahead & 1)
        ):
            self._reordered(-beyond)
        if self._selective:
            self._on_data_selective(now, packet, ahead, out)
        elif ahead == 0:
            self._accept(now, packet, out)
        elif 0 < ahead < self._window:
            self._drop(now, "out_of_sequence")
            self._seen_ahead.add(packet.psn)
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

    def _reordered(self, extent: int) -> None:
        self.reordered_packets += 1
        self.reorder_extent_sum += extent
        if extent > self.reorder_extent_max:
            self.reorder_extent_max = extent

    def _on_data_selective(
        self, now: float, packet: DataPacket, ahead: int, out: list[Packet]
    ) -> None:
        if ahead == 0:
            respond = packet.ack_req
            before = self._expected_psn
            self._accept(now, packet, out, respond=False)
            if self._expected_psn != before:
                # the gap it filled: take the held packets that follow, in order
                held = self._held >> 1
                stored = self._held_packets
                while held & 1:
                    psn = self._expected_psn
                    nxt = stored.pop(psn)
                    self._accept(now, nxt, out, respond=False)
                    if self._expected_psn == psn:  # malformed: dropped; its PSN is a gap again
                        held &= ~1
                        break
                    respond |= nxt.ack_req
                    held >>= 1
                self._held = held
            if respond:
                out.append(self._response())
        elif 0 < ahead < self._window:
            bit = 1 << ahead
            if self._held & bit:
                self._drop(now, "duplicate")
            else:
                self._held |= bit
                self._held_packets[packet.psn] = packet
                self.held_packets += 1
            # an ACK-requesting packet, or one that opens a gap (the first held), answers now
            if packet.ack_req or self._held == bit:
                out.append(self._response())
        elif -self._window <= ahead < 0:
            self._drop(now, "duplicate")
            if packet.ack_req:
                out.append(self._response())
        else:
            self._drop(now, "psn_out_of_window")

    def _response(self) -> AckPacket | SackPacket:
        """The acknowledgement of the current state: an ACK, or a SACK while packets are held."""
        held = self._held
        if not held:
            return self._ack()
        self.sacks_sent += 1
        return SackPacket(
            self.remote_qp,
            psn_add(self._expected_psn, -1),
            self._expected_psn,
            held,
            sack_words(held),
            self._message_index,
        )

    def _drop(self, now: float, reason: str) -> None:
        self.drops[reason] += 1
        self.events.append(PacketDropped(now, reason, self.qpn))

    def _ack(self) -> AckPacket:
        self.acks_sent += 1
        return AckPacket(
            self.remote_qp, psn_add(self._expected_psn, -1), AETH_ACK, self._message_index
        )

    def _accept(
        self, now: float, packet: DataPacket, out: list[Packet], respond: bool = True
    ) -> None:
        starts = packet.opcode in FIRST_OPCODES
        if starts == self._in_message:
            # FIRST/ONLY inside a message, or MIDDLE/LAST outside one: the stream is broken.
            self._drop(now, "malformed")
            return
        self._expected_psn = psn_add(self._expected_psn, 1)
        self._nak_sent = False
        if self._seen_ahead:
            self._seen_ahead.discard(packet.psn)
        n = packet.payload_bytes
        if self._deliveries is not None:
            self._deliveries.append((self._message_index, self._message_offset, packet))
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
        if packet.ack_req and respond:
            out.append(self._ack())

    # -- the common path, taken elsewhere (emulator/sim/native_rqp.py) ------------------------
    @property
    def message_index(self) -> int:
        """The message sequence number its ACKs carry (messages completed so far)."""
        return self._message_index

    def common_path(self) -> tuple[int, int, bool, bool]:
        """(expected PSN, highest PSN, inside a message, whether an in-order packet may take
        the common path elsewhere now: nothing held or seen ahead, no delivery record)."""
        eligible = not self._held and not self._seen_ahead and self._deliveries is None
        return self._expected_psn, self._highest_psn, self._in_message, eligible

    def took_common_path(
        self, packets: int, payload_bytes: int, expected_psn: int, highest_psn: int, acks: int = 0
    ) -> None:
        """The state on_data leaves after `packets` in-order packets on its common path (none
        ending a message or CE-marked; `acks` of them asked for the ACK it answered with) that
        another implementation took."""
        self.packets_received += packets
        self.acks_sent += acks
        self.delivered_bytes += payload_bytes
        self._message_offset += payload_bytes
        self._expected_psn = expected_psn
        self._highest_psn = highest_psn
        self._in_message = True
        self._nak_sent = False

    def took_marked(self, ce_packets: int, cnps: int, last_cnp_s: float) -> None:
        """What on_data adds for `ce_packets` CE-marked packets on its common path that another
        implementation took (their notification point's state and CNPs; their CnpSent events
        it raised itself)."""
        self.ce_packets += ce_packets
        self.cnps_sent += cnps
        self.notification_point.last_cnp_s = last_cnp_s

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
        fast = not ce and psn == self._expected_psn and not self._held and not self._seen_ahead
        ends = self._run_message_ends(opcodes) if fast else None
        if ends is None or self._deliveries is not None:
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
        last = (psn + count - 1) & PSN_MASK
        if psn_diff(last, self._highest_psn) > 0:
            self._highest_psn = last
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
