"""Sender side of a reliable-connected queue pair: segmentation, PSNs, pacing, go-back-N.

Messages are cut into path-MTU packets with consecutive 24-bit PSNs (wrapping). AckReq is set
on every `ack_every_packets`-th packet, on the last of each message and on one that fills the
window. At most `window_packets` packets are unacknowledged. A NAK (PSN sequence error), or
`retransmit_timeout_s` without an answer to the last packet that asked for one, sends everything
from the first unacknowledged PSN again (go-back-N, as RC does, IBTA vol. 1 9.7.5). A message
completes when the ACK covering its last packet arrives. With `reliability: selective` the
requester keeps a scoreboard of what SACKs say the responder holds (emulator.transport.sack):
a packet is lost once `reorder_allowance_packets` later ones are held (RFC 6675's IsLost), and
only the lost packets are sent again; a timeout resends every packet not known to be held.
Packets leave no faster than the congestion controller's rate: `poll_transmit` hands out one
packet when its pacing time has come; the caller asks again at `next_transmit_s` (or takes a
GSO batch with `poll_batch`, or a compact `Burst` with `poll_burst`).

State is per message, not per packet: a packet is known by its sequence number (PSN offset from
the initial one, not wrapped), which says its message and place in it, so its opcode and size
follow; only the AckReq bit is remembered (a set of sequence numbers), because it depends on
the window and the counter when the packet first left. This lets `poll_burst` hand out dozens
of packets for the cost of a few, with the same PSNs, opcodes, AckReq bits, pacing times,
retransmissions and events as one `poll_transmit` per packet.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.transport.burst import Burst
from emulator.transport.congestion import CongestionControl, create_congestion_control
from emulator.transport.events import (
    CnpReceived,
    FlowCompleted,
    MessagePosted,
    PacketDropped,
    RateChanged,
    Retransmitted,
    TransportEvent,
)
from emulator.transport.packets import (
    ATTRIBUTION_TAG_MASK,
    BTH_BYTES,
    ETHERNET_OVERHEAD_BYTES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    PSN_MASK,
    RETH_BYTES,
    RETH_OPCODES,
    SEGMENT_OPCODES,
    UDP_HEADER_BYTES,
    AckPacket,
    DataPacket,
    SackPacket,
    psn_diff,
)
from emulator.transport.params import TransportParams
from emulator.transport.sack import Scoreboard

# Bytes a packet costs on the link beyond its UDP payload (IPv4 + UDP + Ethernet framing): the
# rate limiter counts them so a QP at line rate fills the link exactly.
IPV4_FRAME_OVERHEAD_BYTES = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + ETHERNET_OVERHEAD_BYTES
# IPv4 limits one datagram, and so one GSO buffer before segmentation, to 65535 bytes including
# the 20-byte IP and 8-byte UDP headers (net/ipv4/ip_output.c __ip_append_data).
GSO_MAX_BUFFER_BYTES = 65535 - IPV4_HEADER_BYTES - UDP_HEADER_BYTES
_SLACK_S = 1e-12


@dataclass(slots=True, eq=False)
class _Message:
    message_id: int
    size_bytes: int
    posted_s: float
    payload: bytes | None
    packets: int  # how many packets it is cut into (a 0-byte message is one)
    first_seq: int = -1  # sequence number of its first packet, once that left
    sent: int = 0  # packets handed out for the first time
    tag: int = 0  # attribution tag of its packets (emulator.transport.packets.ATTRIBUTION_TAG_AT)


class SendQueuePair:
    """The requester half of an RC QP."""

    def __init__(
        self,
        *,
        qpn: int,
        dest_qp: int,
        params: TransportParams,
        line_rate_bps: float,
        initial_psn: int = 0,
        verb: str = "send",
        cc: CongestionControl | None = None,
        events: list[TransportEvent] | None = None,
        frame_overhead_bytes: int = IPV4_FRAME_OVERHEAD_BYTES,
        max_burst_s: float = 0.0,
    ) -> None:
        self.qpn = qpn
        self.dest_qp = dest_qp
        self.params = params
        self.cc = (
            cc if cc is not None else create_congestion_control(params, line_rate_bps=line_rate_bps)
        )
        # A controller whose on_packet_sent is the base class's no-op never needs the per-packet
        # call: bursts then skip it.
        self._cc_counts_bytes = type(self.cc).on_packet_sent is not CongestionControl.on_packet_sent
        self.events: list[TransportEvent] = events if events is not None else []
        opcodes = SEGMENT_OPCODES[verb]
        self._op_first = int(opcodes["first"])
        self._op_middle = int(opcodes["middle"])
        self._op_last = int(opcodes["last"])
        self._op_only = int(opcodes["only"])
        self._mtu = params.path_mtu_bytes
        self._ack_every = params.ack_every_packets
        self._window = params.window_packets
        self._rto_s = params.retransmit_timeout_s
        self._overhead = frame_overhead_bytes
        # How far the pacing clock may lag behind `now`: a caller that polls on coarse ticks
        # (the engine) gets the packets it owes since the last tick as one burst; 0 for a caller
        # that polls exactly when packets are due (the in-memory fabric).
        self._max_burst_s = max_burst_s
        self._initial_psn = initial_psn & PSN_MASK
        self._next_seq = 0  # sequence number of the next new packet
        self._una_seq = 0  # oldest unacknowledged
        # the message of the packet poll_transmit handed out last (a simulation tags it by this)
        self.message_id_sent = -1
        self._resend_seq: int | None = None  # next to send again while going back
        self._resend_msg = 0  # index in _msgs of the message holding _resend_seq
        # selective repeat: what the responder holds beyond _una_seq and what to send again
        self._board = (
            Scoreboard(params.reorder_allowance_packets)
            if params.reliability == "selective"
            else None
        )
        self.sacks_received = 0
        # Posted, not completed, in order: _msgs[_head:]; _msgs[_seg] is the first one not yet
        # fully cut into packets (_seg == len(_msgs): all are).
        self._msgs: list[_Message] = []
        self._head = 0
        self._seg = 0
        self._ack_req_order: deque[int] = deque()  # sequence numbers sent with AckReq, unacked
        self._ack_req_set: set[int] = set()
        self._since_ack_req = 0
        self._next_tx_s = -math.inf
        self._last_tx_s = -math.inf
        self._last_tx_bits = 0
        self._last_progress_s = 0.0
        self._ack_req_sent_s = -math.inf
        self._ack_req_seq = -1  # the last packet that asked for a response
        # Pacing deficit: credit a backlogged queue pair's rate earned but the caller's polls came
        # too late to use (the bucket's floor cut it): bytes it should have sent and did not.
        self._backlogged = False
        self.pacing_lost_bytes = 0.0
        self.pacing_lost_s = 0.0  # the same, as the time it could have been sending
        # counters
        self.packets_sent = 0
        self.packets_retransmitted = 0
        self.bytes_acked = 0
        self.cnps_received = 0
        self.acks_received = 0
        self.naks_received = 0
        self.drops: Counter[str] = Counter()

    # -- posting and transmitting ------------------------------------------------------
    def post_send(
        self,
        *,
        now: float,
        message_id: int,
        size_bytes: int,
        payload: bytes | None = None,
        tag: int = 0,
    ) -> None:
        """Queue a message of `size_bytes` (content `payload`, or zeros); `tag` is the
        attribution tag its packets carry in poll_burst's bursts (0..63, 0: untagged)."""
        if payload is not None and len(payload) != size_bytes:
            raise ValueError("payload length differs from size_bytes")
        if not 0 <= tag <= ATTRIBUTION_TAG_MASK:
            raise ValueError(f"attribution tag {tag} is not in 0..{ATTRIBUTION_TAG_MASK}")
        packets = max(1, -(-size_bytes // self._mtu))
        self._msgs.append(_Message(message_id, size_bytes, now, payload, packets, tag=tag))
        self.events.append(MessagePosted(self.qpn, message_id, size_bytes, now))

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing waiting for an acknowledgement."""
        return self._head == len(self._msgs)

    @property
    def rate_bps(self) -> float:
        return self.cc.rate_bps

    @property
    def _una_psn(self) -> int:
        return (self._initial_psn + self._una_seq) & PSN_MASK

    def _has_work(self) -> bool:
        if self._resend_seq is not None:
            return True
        if self._board is not None and self._board.resend_pending(self._una_seq):
            return True
        return self._seg < len(self._msgs) and self._next_seq - self._una_seq < self._window

    def next_transmit_s(self) -> float | None:
        """When poll_transmit will next hand out a packet (None: blocked on ACKs or no data)."""
        return self._next_tx_s if self._has_work() else None

    def due_to_send(self, now: float) -> bool:
        """Whether poll_burst(now=now) would hand out a packet, asked by an arbiter before it
        works out a turn; one found with nothing to send is no longer backlogged, as poll_burst
        would record."""
        if self._next_tx_s > now:
            return False
        if self._has_work():
            return True
        self._backlogged = False
        return False

    @property
    def pacing_due_s(self) -> float:
        """The pacing clock: when a next packet may leave, whether or not there is one."""
        return self._next_tx_s

    # -- what a packet is, from its message and place ------------------------------------
    def _opcode(self, m: _Message, k: int) -> int:
        if k == 0:
            return self._op_only if m.packets == 1 else self._op_first
        return self._op_last if k == m.packets - 1 else self._op_middle

    def _describe(self, m: _Message, k: int) -> tuple[int, int, int]:
        """(opcode, payload bytes, UDP payload bytes) of packet k of message m."""
        n = m.size_bytes - k * self._mtu
        if n > self._mtu:
            n = self._mtu
        opcode = self._opcode(m, k)
        reth = RETH_BYTES if opcode in RETH_OPCODES else 0
        return opcode, n, BTH_BYTES + reth + n + (-n & 3) + ICRC_BYTES

    def _packet(self, m: _Message, k: int, ack_req: bool) -> DataPacket:
        offset = k * self._mtu
        n = min(self._mtu, m.size_bytes - offset)
        opcode = self._opcode(m, k)
        psn = (self._initial_psn + m.first_seq + k) & PSN_MASK
        data = m.payload[offset : offset + n] if m.payload is not None else None
        if opcode in RETH_OPCODES:
            return DataPacket(
                self.dest_qp, psn, opcode, ack_req, n, offset, data, 0, 0, m.size_bytes
            )
        return DataPacket(self.dest_qp, psn, opcode, ack_req, n, offset, data)

    def _next_position(self) -> tuple[_Message, int, bool]:
        """The message and index of the packet poll_transmit would hand out next, and whether
        it is sent again (call only when _has_work)."""
        if self._resend_seq is not None:
            m = self._msgs[self._resend_msg]
            return m, self._resend_seq - m.first_seq, True
        if self._board is not None and self._board.resend_pending(self._una_seq):
            seq = self._board.next_resend()
            m = self._msgs[self._message_index(seq)]
            return m, seq - m.first_seq, True
        m = self._msgs[self._seg]
        return m, m.sent, False

    def _peek_size(self) -> int:
        """UDP payload size of the packet poll_transmit would hand out next."""
        m, k, _ = self._next_position()
        return self._describe(m, k)[2]

    # -- taking packets (state changes shared by poll_transmit and poll_burst) ------------
    def _take_resent(self, count: int) -> list[int]:
        """Advance the go-back-N cursor by `count` packets (all in one message); return the
        indexes (0..count-1) of those that carry AckReq."""
        seq = self._resend_seq
        assert seq is not None
        acks = self._ack_req_set
        ack_at = [j for j in range(count) if seq + j in acks] if acks else []
        seq += count
        m = self._msgs[self._resend_msg]
        if seq >= self._next_seq:
            self._resend_seq = None
        else:
            self._resend_seq = seq
            if seq >= m.first_seq + m.packets:
                self._resend_msg += 1
        self.packets_retransmitted += count
        return ack_at

    def _take_new(self, count: int) -> list[int]:
        """Cut the next `count` packets of the message being segmented (count fits the message
        and the window); return the indexes of those that carry AckReq."""
        m = self._msgs[self._seg]
        k = m.sent
        seq = self._next_seq
        if k == 0:
            m.first_seq = seq
        every = self._ack_every
        ack_at = list(range(every - 1 - self._since_ack_req, count, every))
        # The last of a message asks for an ACK, and so does the packet that fills the window:
        # the sender then waits, so something must ask for the ACK that lets it continue.
        # Either can only be the last of this run (runs end at the message and window edges).
        ends_message = k + count == m.packets
        fills_window = seq + count - self._una_seq >= self._window
        if (ends_message or fills_window) and (not ack_at or ack_at[-1] != count - 1):
            ack_at.append(count - 1)
        self._since_ack_req = count - 1 - ack_at[-1] if ack_at else self._since_ack_req + count
        if ack_at:
            order = self._ack_req_order
            ack_set = self._ack_req_set
            for j in ack_at:
                order.append(seq + j)
                ack_set.add(seq + j)
        self._next_seq = seq + count
        m.sent = k + count
        if ends_message:
            self._seg += 1
        return ack_at

    def poll_transmit(self, *, now: float) -> DataPacket | None:
        if now + _SLACK_S < self._next_tx_s or not self._has_work():
            return None
        if self._resend_seq is not None:
            m, k, _ = self._next_position()
            ack_req = bool(self._take_resent(1))
        elif self._board is not None and self._board.resend_pending(self._una_seq):
            m, k, _ = self._next_position()
            self._board.take(1)
            self.packets_retransmitted += 1
            ack_req = True  # a resent packet asks for the answer that shows it arrived
        else:
            if self._next_seq == self._una_seq:
                self._last_progress_s = now
            m = self._msgs[self._seg]
            k = m.sent
            ack_req = bool(self._take_new(1))
        packet = self._packet(m, k, ack_req)
        self.message_id_sent = m.message_id
        self.packets_sent += 1
        if ack_req:
            # IB transport timer: runs while a packet that asked for a response is unanswered,
            # (re)started when one leaves, so a QP slowed to a few packets per timeout is not
            # mistaken for one whose packets were lost.
            self._ack_req_sent_s = now
            self._ack_req_seq = m.first_seq + k
        size = packet.udp_payload_bytes + self._overhead
        cc = self.cc
        self._last_tx_s = max(self._next_tx_s, now - self._max_burst_s)
        self._last_tx_bits = size * 8
        self._next_tx_s = self._last_tx_s + self._last_tx_bits / cc.rate_bps
        if cc.on_packet_sent(now=now, size_bytes=size):
            self._rate_changed(now)
        return packet

    def poll_batch(self, *, now: float, max_packets: int) -> list[DataPacket]:
        """Every packet due by `now` (at most max_packets) that can share one UDP GSO buffer: all
        the size of the first, except a shorter last one, which ends the batch."""
        batch: list[DataPacket] = []
        size = 0
        while len(batch) < max_packets:
            due = self.next_transmit_s()
            if due is None or due > now + _SLACK_S:
                break
            if batch and self._peek_size() != size:
                if self._peek_size() > size:
                    break
                packet = self.poll_transmit(now=now)
                if packet is not None:
                    batch.append(packet)
                break
            packet = self.poll_transmit(now=now)
            if packet is None:
                break
            if not batch:
                size = packet.udp_payload_bytes
            batch.append(packet)
        return batch

    def poll_burst(
        self,
        *,
        now: float,
        floor_s: float,
        max_packets: int,
        max_bytes: int = GSO_MAX_BUFFER_BYTES,
        count_lost: bool = True,
        buffers: int = 1,
    ) -> Burst | None:
        """The packets due by `now` that one GSO buffer can carry (all the size of the first, a
        shorter last one ends it; at most max_packets and max_bytes), each taken at its own due
        time but not before floor_s: the same packets, times and state as calling
        poll_transmit(now=max(due, floor_s)) while the due time is <= now, which is the engine's
        token bucket of depth now - floor_s (emulator.engine.pacing). None: nothing is due.
        For a queue pair made with max_burst_s = 0 (the floor bounds the credit instead).
        With `buffers` > 1, what that many GSO buffers of max_bytes carry (max_packets still
        bounds the whole): the same packets and state as that many calls in a row.

        Credit the floor cuts while the queue pair has been backlogged since its last burst (data
        and window room left) adds to pacing_lost_bytes, unless count_lost is False (the caller
        knows another limit bound it: its NIC's arbiter was the bottleneck)."""
        if self._max_burst_s:
            raise ValueError(
                "poll_burst paces with floor_s: make the queue pair with max_burst_s=0"
            )
        due = self._next_tx_s
        if due > now or max_packets < 1:
            return None
        if not self._has_work():
            self._backlogged = False
            return None
        cc = self.cc
        rate = cc.rate_bps
        if due < floor_s and self._backlogged and count_lost:
            self.pacing_lost_bytes += (floor_s - due) * rate / 8
            self.pacing_lost_s += floor_s - due
        t0 = due if due > floor_s else floor_s
        msgs = self._msgs
        m, k, _ = self._next_position()
        _, payload, segment = self._describe(m, k)
        spacing_s = (segment + self._overhead) * 8 / rate
        # packets of this size due by now, the first at t0 and the others one spacing apart
        limit = min(
            max_packets, buffers * max(1, max_bytes // segment), int((now - t0) / spacing_s) + 1
        )
        count = 0
        board = self._board
        selective_resend = board is not None and board.resend_pending(self._una_seq)
        if self._resend_seq is not None:
            first_seq = self._resend_seq
        elif board is not None and selective_resend:
            first_seq = board.next_resend()
        else:
            first_seq = self._next_seq
        opcodes = bytearray()
        ack_at: list[int] = []
        resent = 0
        compact = True  # the Burst's compact form describes every segment
        runs: list[tuple[_Message, int, int]] = []  # (message, first index, packets)
        tag = m.tag  # of every segment so far (mixed: some run's message had another)
        mixed = False
        last_payload = payload
        size_last = segment
        changed_s: float | None = None
        ends = False
        if self._resend_seq is None and not selective_resend and self._next_seq == self._una_seq:
            self._last_progress_s = t0
        while count < limit and not ends:
            if self._resend_seq is not None:
                m = msgs[self._resend_msg]
                k = self._resend_seq - m.first_seq
                room = self._next_seq - self._resend_seq
                resend = True
            elif selective_resend:
                assert board is not None
                # one run of consecutive lost packets: a burst's PSNs follow each other
                if not board.resend_pending(self._una_seq) or (
                    board.next_resend() != first_seq + count
                ):
                    break
                seq = board.next_resend()
                m = msgs[self._message_index(seq)]
                k = seq - m.first_seq
                room = board.run_length(self._una_seq, limit)
                resend = True
            elif self._seg < len(msgs):
                if count and first_seq + count != self._next_seq:
                    break
                room = self._window - (self._next_seq - self._una_seq)
                if room <= 0:
                    break
                m = msgs[self._seg]
                k = m.sent
                resend = False
            else:
                break
            # a run of packets of one size within one message: the first, the last (either may
            # differ in size or carry a RETH) or the middle ones between
            last_k = m.packets - 1
            n = min(1 if k == 0 or k == last_k else last_k - k, room, limit - count)
            opcode, n_payload, size = self._describe(m, k)
            if size != segment:
                if size > segment:
                    break
                n = 1
                ends = True  # a shorter packet ends the burst
            if self._cc_counts_bytes:
                # the controller sees every packet at its own time, and a rate change ends the
                # burst (the packets after it are spaced at the new rate)
                wire = size + self._overhead
                for j in range(n):
                    t = t0 + (count + j) * spacing_s
                    if cc.on_packet_sent(now=t, size_bytes=wire):
                        n = j + 1
                        changed_s = t
                        ends = True
                        break
            if resend:
                if board is not None and self._resend_seq is None:
                    board.take(n)
                    self.packets_retransmitted += n
                    at = list(range(n))  # each resent packet asks for the answer it needs
                else:
                    at = self._take_resent(n)
                resent += n
            else:
                at = self._take_new(n)
            if at:
                ack_at.extend([count + j for j in at])
            opcodes += bytes((opcode,)) * n
            if (
                m.payload is not None
                or opcode in RETH_OPCODES
                or (n_payload != payload and size == segment)
            ):
                compact = False
            runs.append((m, k, n))
            if m.tag != tag:
                mixed = True
            count += n
            last_payload = n_payload
            size_last = size
        t_last = t0 + (count - 1) * spacing_s
        self.packets_sent += count
        if ack_at:
            self._ack_req_sent_s = t0 + ack_at[-1] * spacing_s
            self._ack_req_seq = first_seq + ack_at[-1]
        self._last_tx_s = t_last
        self._last_tx_bits = (size_last + self._overhead) * 8
        self._next_tx_s = t_last + self._last_tx_bits / rate
        self._backlogged = self._has_work()
        if changed_s is not None:
            self._rate_changed(changed_s)
        tags = None
        if mixed:  # a burst across messages with different tags: one per segment
            tags = b"".join(bytes((rm.tag,)) * rn for rm, _, rn in runs)
        packets = None
        if not compact:
            acks = set(ack_at)
            packets = []
            i = 0
            for m, k, n in runs:
                for j in range(n):
                    packets.append(self._packet(m, k + j, i in acks))
                    i += 1
        return Burst(
            self.dest_qp,
            (self._initial_psn + first_seq) & PSN_MASK,
            count,
            segment,
            payload,
            last_payload,
            bytes(opcodes),
            ack_at,
            resent,
            packets,
            tag,
            tags,
        )

    # -- feedback ------------------------------------------------------------------------
    def on_ack(self, *, now: float, packet: AckPacket | SackPacket) -> None:
        """An ACK, NAK or SACK for this QP."""
        if type(packet) is SackPacket:
            self._on_sack(now, packet)
            return
        if packet.is_nak:
            self.naks_received += 1
        else:
            self.acks_received += 1
        acked = psn_diff(packet.psn, self._una_psn) + (0 if packet.is_nak else 1)
        if acked < 0:
            return  # an older ACK overtaken by a newer one: nothing new
        unacked = self._next_seq - self._una_seq
        if acked > unacked or (packet.is_nak and acked == unacked):
            self.drops["ack_out_of_window"] += 1
            self.events.append(PacketDropped(now, "ack_out_of_window", self.qpn))
            return
        if acked:
            self._acknowledge(now, acked)
        if packet.is_nak:
            self._go_back(now, "nak")

    def _on_sack(self, now: float, packet: SackPacket) -> None:
        self.sacks_received += 1
        acked = psn_diff(packet.psn, self._una_psn) + 1
        if acked < 0:
            return  # overtaken by a newer acknowledgement
        if acked > self._next_seq - self._una_seq:
            self.drops["ack_out_of_window"] += 1
            self.events.append(PacketDropped(now, "ack_out_of_window", self.qpn))
            return
        if acked:
            self._acknowledge(now, acked)
        board = self._board
        if board is None:
            return  # a go-back-N requester takes the cumulative part only
        base_seq = self._una_seq + psn_diff(packet.base_psn, self._una_psn)
        lost = board.on_sack(self._una_seq, self._next_seq, base_seq, packet.bitmap)
        if lost:
            psn = (self._initial_psn + lost[0]) & PSN_MASK
            self.events.append(Retransmitted(self.qpn, now, psn, len(lost), "sack"))

    def on_acks(self, *, now: float, psns: Sequence[int]) -> None:
        """Several ACKs (none a NAK) for this QP in arrival order, all at `now` (the segments of
        one GRO read): the same state and events as on_ack for each in turn. With nothing sent
        in between, that is one acknowledgement up to the furthest of them, unless one is for a
        PSN never sent (then each goes through on_ack, which counts it)."""
        una = self._una_psn
        unacked = self._next_seq - self._una_seq
        furthest = -1
        for psn in psns:
            d = ((psn - una + (1 << 23)) & PSN_MASK) - (1 << 23)  # psn_diff, inlined
            if d >= unacked:
                for p in psns:
                    self.on_ack(now=now, packet=AckPacket(self.dest_qp, p))
                return
            if d > furthest:
                furthest = d
        self.acks_received += len(psns)
        if furthest >= 0:
            self._acknowledge(now, furthest + 1)

    def _acknowledge(self, now: float, count: int) -> None:
        una = self._una_seq
        new_una = una + count
        msgs = self._msgs
        mtu = self._mtu
        head = self._head
        while head < len(msgs):
            m = msgs[head]
            if m.first_seq < 0 or m.first_seq >= new_una:
                break
            start = max(una, m.first_seq) - m.first_seq
            end = min(new_una - m.first_seq, m.packets)
            self.bytes_acked += min(end * mtu, m.size_bytes) - min(start * mtu, m.size_bytes)
            if end < m.packets:
                break
            self.events.append(FlowCompleted(self.qpn, m.message_id, m.size_bytes, m.posted_s, now))
            head += 1
        self._head = head
        self._una_seq = new_una
        if self._board is not None:
            self._board.advance(count)
        order = self._ack_req_order
        while order and order[0] < new_una:
            self._ack_req_set.discard(order.popleft())
        self._last_progress_s = now
        if self._resend_seq is not None and self._resend_seq < new_una:
            if new_una >= self._next_seq:
                self._resend_seq = None
            else:
                self._resend_seq = new_una
                self._resend_msg = self._message_index(new_una)
        self._compact()

    def _message_index(self, seq: int) -> int:
        """Index in _msgs of the message holding packet `seq` (one that was sent)."""
        i = self._head
        msgs = self._msgs
        while seq >= msgs[i].first_seq + msgs[i].packets:
            i += 1
        return i

    def _compact(self) -> None:
        """Forget completed messages once they are most of the list (amortised O(1))."""
        head = self._head
        if head >= 64 and head * 2 >= len(self._msgs):
            del self._msgs[:head]
            self._seg -= head
            self._resend_msg = max(self._resend_msg - head, 0)
            self._head = 0

    def _go_back(self, now: float, reason: str) -> None:
        unacked = self._next_seq - self._una_seq
        if not unacked:
            return
        board = self._board
        if board is not None:
            # selective: a timeout sends again what is not held; a NAK names one lost packet
            if reason == "nak":
                board.lost(self._una_seq)
                count = 1
            else:
                count = board.all_lost(self._una_seq, self._next_seq)
            self._last_progress_s = now
            self.events.append(Retransmitted(self.qpn, now, self._una_psn, count, reason))
            return
        self._resend_seq = self._una_seq
        self._resend_msg = self._message_index(self._una_seq)
        self._last_progress_s = now
        self.events.append(Retransmitted(self.qpn, now, self._una_psn, unacked, reason))

    def on_cnp(self, *, now: float) -> None:
        self.cnps_received += 1
        self.events.append(CnpReceived(self.qpn, now))
        if self.cc.on_cnp(now=now):
            self._rate_changed(now)

    def _rate_changed(self, now: float) -> None:
        cc = self.cc
        # The rate limiter spaces the next packet from the last one at the new rate: a QP that
        # was slowed to a crawl must not keep waiting out the crawl's gap once it speeds up. But
        # credit earns at the rate in force: a QP still inside the old rate's gap at the change
        # sends from `now` on, not from a time the new rate would have allowed before it (a
        # caller's bucket would hand that out as a burst, and count what its floor cut as pacing
        # deficit); one already owed a packet at the old rate (polled late, on coarse ticks)
        # keeps that due time.
        spaced = self._last_tx_s + self._last_tx_bits / cc.rate_bps
        owed = self._next_tx_s if self._next_tx_s < now else now
        self._next_tx_s = spaced if spaced > owed else owed
        self.events.append(RateChanged(self.qpn, now, cc.rate_bps, cc.target_rate_bps, cc.reason))

    # -- timers --------------------------------------------------------------------------
    def next_timer_s(self) -> float | None:
        """The earliest deadline on_timer must run at (retransmission or rate increase)."""
        deadline = self.cc.next_deadline_s()
        rto = self._rto_deadline_s()
        if rto is not None:
            deadline = rto if deadline is None else min(deadline, rto)
        return deadline

    def _rto_deadline_s(self) -> float | None:
        if self._next_seq == self._una_seq or self._resend_seq is not None:
            return None
        if self._board is not None and self._board.resend_pending(self._una_seq):
            return None
        if self._ack_req_seq < self._una_seq:
            return None  # no response is due yet: the next AckReq packet starts the timer
        return max(self._ack_req_sent_s, self._last_progress_s) + self._rto_s

    def on_timer(self, *, now: float) -> None:
        if self.cc.on_timer(now=now):
            self._rate_changed(now)
        rto = self._rto_deadline_s()
        if rto is not None and now + _SLACK_S >= rto:
            self._go_back(now, "timeout")
