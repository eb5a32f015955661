"""Sender side of a reliable-connected queue pair: segmentation, PSNs, pacing, go-back-N.

Messages are cut into path-MTU packets with consecutive 24-bit PSNs (wrapping). AckReq is set
on every `ack_every_packets`-th packet, on the last of each message and on one that fills the
window. At most `window_packets` packets are unacknowledged. A NAK (PSN sequence error), or
`retransmit_timeout_s` without an answer to the last packet that asked for one, sends everything
from the first unacknowledged PSN again (go-back-N, as RC does, IBTA vol. 1 9.7.5). A message
completes when the ACK covering its last packet arrives. Packets leave no faster than the
congestion controller's rate: `poll_transmit` hands out one packet when its pacing time has
come; the caller asks again at `next_transmit_s` (or takes a GSO batch with `poll_batch`).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass

from emulator.transport.congestion import CongestionControl, create_congestion_control
from emulator.transport.events import (
    CnpReceived,
    FlowCompleted,
    FlowStarted,
    PacketDropped,
    RateChanged,
    Retransmitted,
    TransportEvent,
)
from emulator.transport.packets import (
    BTH_BYTES,
    ETHERNET_OVERHEAD_BYTES,
    ICRC_BYTES,
    IPV4_HEADER_BYTES,
    LAST_OPCODES,
    RETH_BYTES,
    RETH_OPCODES,
    SEGMENT_OPCODES,
    UDP_HEADER_BYTES,
    AckPacket,
    DataPacket,
    psn_add,
    psn_diff,
)
from emulator.transport.params import TransportParams

# Bytes a packet costs on the link beyond its UDP payload (IPv4 + UDP + Ethernet framing): the
# rate limiter counts them so a QP at line rate fills the link exactly.
IPV4_FRAME_OVERHEAD_BYTES = IPV4_HEADER_BYTES + UDP_HEADER_BYTES + ETHERNET_OVERHEAD_BYTES
_SLACK_S = 1e-12


@dataclass
class _Message:
    message_id: int
    size_bytes: int
    posted_s: float
    payload: bytes | None
    next_offset_bytes: int = 0


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
        self.events: list[TransportEvent] = events if events is not None else []
        self._opcodes = SEGMENT_OPCODES[verb]
        self._mtu = params.path_mtu_bytes
        self._ack_every = params.ack_every_packets
        self._window = params.window_packets
        self._rto_s = params.retransmit_timeout_s
        self._overhead = frame_overhead_bytes
        # How far the pacing clock may lag behind `now`: a caller that polls on coarse ticks
        # (the engine) gets the packets it owes since the last tick as one burst; 0 for a caller
        # that polls exactly when packets are due (the in-memory fabric).
        self._max_burst_s = max_burst_s
        self._next_psn = initial_psn
        self._una_psn = initial_psn
        self._unacked: deque[DataPacket] = deque()
        self._resend_at: int | None = None  # index into _unacked while going back
        self._pending: deque[_Message] = deque()  # not yet fully segmented
        self._in_flight: deque[_Message] = deque()  # fully segmented, not yet completed
        self._since_ack_req = 0
        self._next_tx_s = -math.inf
        self._last_tx_s = -math.inf
        self._last_tx_bits = 0
        self._last_progress_s = 0.0
        self._ack_req_sent_s = -math.inf
        self._ack_req_psn = psn_add(initial_psn, -1)
        # counters
        self.packets_sent = 0
        self.packets_retransmitted = 0
        self.bytes_acked = 0
        self.cnps_received = 0
        self.drops: Counter[str] = Counter()

    # -- posting and transmitting ------------------------------------------------------
    def post_send(
        self, *, now: float, message_id: int, size_bytes: int, payload: bytes | None = None
    ) -> None:
        """Queue a message of `size_bytes` (content `payload`, or zeros)."""
        if payload is not None and len(payload) != size_bytes:
            raise ValueError("payload length differs from size_bytes")
        self._pending.append(_Message(message_id, size_bytes, now, payload))
        self.events.append(FlowStarted(self.qpn, message_id, size_bytes, now))

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing waiting for an acknowledgement."""
        return not self._pending and not self._unacked and not self._in_flight

    @property
    def rate_bps(self) -> float:
        return self.cc.rate_bps

    def _has_work(self) -> bool:
        if self._resend_at is not None:
            return True
        return bool(self._pending) and len(self._unacked) < self._window

    def next_transmit_s(self) -> float | None:
        """When poll_transmit will next hand out a packet (None: blocked on ACKs or no data)."""
        return self._next_tx_s if self._has_work() else None

    def poll_transmit(self, *, now: float) -> DataPacket | None:
        if now + _SLACK_S < self._next_tx_s:
            return None
        packet: DataPacket | None
        if self._resend_at is not None:
            packet = self._unacked[self._resend_at]
            self._resend_at += 1
            if self._resend_at >= len(self._unacked):
                self._resend_at = None
            self.packets_retransmitted += 1
        elif self._pending and len(self._unacked) < self._window:
            packet = self._segment()
            if not self._unacked:
                self._last_progress_s = now
            self._unacked.append(packet)
        else:
            return None
        self.packets_sent += 1
        if packet.ack_req:
            # IB transport timer: runs while a packet that asked for a response is unanswered,
            # (re)started when one leaves, so a QP slowed to a few packets per timeout is not
            # mistaken for one whose packets were lost.
            self._ack_req_sent_s = now
            self._ack_req_psn = packet.psn
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

    def _peek_size(self) -> int:
        """UDP payload size of the packet poll_transmit would hand out next."""
        if self._resend_at is not None:
            return self._unacked[self._resend_at].udp_payload_bytes
        msg = self._pending[0]
        first = msg.next_offset_bytes == 0
        n = min(self._mtu, msg.size_bytes - msg.next_offset_bytes)
        last = msg.next_offset_bytes + n >= msg.size_bytes
        position = ("only" if last else "first") if first else ("last" if last else "middle")
        opcode = self._opcodes[position]
        reth = RETH_BYTES if opcode in RETH_OPCODES else 0
        return BTH_BYTES + reth + n + (-n & 3) + ICRC_BYTES

    def _segment(self) -> DataPacket:
        msg = self._pending[0]
        offset = msg.next_offset_bytes
        n = min(self._mtu, msg.size_bytes - offset)
        first = offset == 0
        last = offset + n >= msg.size_bytes
        position = ("only" if last else "first") if first else ("last" if last else "middle")
        opcode = self._opcodes[position]
        self._since_ack_req += 1
        # Also on the packet that fills the window: the sender then waits, so something must
        # ask for the ACK that lets it continue.
        fills_window = len(self._unacked) + 1 >= self._window
        ack_req = last or fills_window or self._since_ack_req >= self._ack_every
        if ack_req:
            self._since_ack_req = 0
        psn = self._next_psn
        self._next_psn = psn_add(psn, 1)
        data = msg.payload[offset : offset + n] if msg.payload is not None else None
        if first and opcode in (
            SEGMENT_OPCODES["write"]["first"],
            SEGMENT_OPCODES["write"]["only"],
        ):
            packet = DataPacket(
                self.dest_qp, psn, opcode, ack_req, n, offset, data, 0, 0, msg.size_bytes
            )
        else:
            packet = DataPacket(self.dest_qp, psn, opcode, ack_req, n, offset, data)
        msg.next_offset_bytes = offset + n
        if last:
            self._in_flight.append(self._pending.popleft())
        return packet

    # -- feedback ------------------------------------------------------------------------
    def on_ack(self, *, now: float, packet: AckPacket) -> None:
        """An ACK or NAK for this QP."""
        acked = psn_diff(packet.psn, self._una_psn) + (0 if packet.is_nak else 1)
        if acked < 0:
            return  # an older ACK overtaken by a newer one: nothing new
        if acked > len(self._unacked) or (packet.is_nak and acked == len(self._unacked)):
            self.drops["ack_out_of_window"] += 1
            self.events.append(PacketDropped(now, "ack_out_of_window", self.qpn))
            return
        if acked:
            self._acknowledge(now, acked)
        if packet.is_nak:
            self._go_back(now, "nak")

    def _acknowledge(self, now: float, count: int) -> None:
        unacked = self._unacked
        for _ in range(count):
            done = unacked.popleft()
            self.bytes_acked += done.payload_bytes
            if done.opcode in LAST_OPCODES:
                msg = self._in_flight.popleft()
                self.events.append(
                    FlowCompleted(self.qpn, msg.message_id, msg.size_bytes, msg.posted_s, now)
                )
        self._una_psn = psn_add(self._una_psn, count)
        self._last_progress_s = now
        if self._resend_at is not None:
            self._resend_at = max(self._resend_at - count, 0)
            if self._resend_at >= len(unacked):
                self._resend_at = None

    def _go_back(self, now: float, reason: str) -> None:
        if not self._unacked:
            return
        self._resend_at = 0
        self._last_progress_s = now
        self.events.append(Retransmitted(self.qpn, now, self._una_psn, len(self._unacked), reason))

    def on_cnp(self, *, now: float) -> None:
        self.cnps_received += 1
        self.events.append(CnpReceived(self.qpn, now))
        if self.cc.on_cnp(now=now):
            self._rate_changed(now)

    def _rate_changed(self, now: float) -> None:
        cc = self.cc
        # The rate limiter spaces the next packet from the last one at the new rate: a QP that
        # was slowed to a crawl must not keep waiting out the crawl's gap once it speeds up.
        self._next_tx_s = self._last_tx_s + self._last_tx_bits / cc.rate_bps
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
        if not self._unacked or self._resend_at is not None:
            return None
        if psn_diff(self._ack_req_psn, self._una_psn) < 0:
            return None  # no response is due yet: the next AckReq packet starts the timer
        return max(self._ack_req_sent_s, self._last_progress_s) + self._rto_s

    def on_timer(self, *, now: float) -> None:
        if self.cc.on_timer(now=now):
            self._rate_changed(now)
        rto = self._rto_deadline_s()
        if rto is not None and now + _SLACK_S >= rto:
            self._go_back(now, "timeout")
