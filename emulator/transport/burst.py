"""A burst: up to one GSO buffer of consecutive data packets of one queue pair, described compactly.

`SendQueuePair.poll_burst` hands these out instead of one DataPacket per segment: the first PSN,
how many segments, the UDP payload size they share (the last may be shorter), the payload size of
the full ones and of the last, and per segment only what varies on the wire (the opcode byte and
whether AckReq is set). The PSNs are consecutive (24-bit, wrapping). A burst whose segments
need more than that (a RETH, real payload bytes, or equal-size segments with different payload
sizes) also carries its packets as descriptors: the wire builder then takes the general path.
`tag` is the attribution tag of every segment (emulator.transport.packets.ATTRIBUTION_TAG_AT),
or `tags` one per segment when the burst spans messages with different tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.transport.packets import BTH_BYTES, ICRC_BYTES, PSN_MASK, DataPacket


@dataclass(slots=True)
class Burst:
    dest_qp: int
    psn: int  # of the first segment
    count: int
    segment_bytes: int  # UDP payload of every segment but the last (the GSO segment size)
    payload_bytes: int  # of every segment but the last
    last_payload_bytes: int
    opcodes: bytes  # one per segment
    ack_req_at: list[int]  # indexes of the segments that carry AckReq, ascending
    retransmitted: int = 0  # how many of the segments are sent again (go-back-N)
    packets: list[DataPacket] | None = None  # set when the compact form does not say it all
    tag: int = 0  # the attribution tag of every segment (0: untagged)
    tags: bytes | None = None  # one per segment instead, when they differ

    @property
    def last_segment_bytes(self) -> int:
        """UDP payload bytes of the last segment (<= segment_bytes)."""
        if self.packets is not None:
            return self.packets[-1].udp_payload_bytes
        if self.count == 1:
            return self.segment_bytes
        n = self.last_payload_bytes
        return BTH_BYTES + n + (-n & 3) + ICRC_BYTES

    @property
    def wire_bytes(self) -> int:
        """UDP payload bytes of all segments together (the GSO buffer's length)."""
        return self.segment_bytes * (self.count - 1) + self.last_segment_bytes

    def split(self) -> list[Burst]:
        """One single-segment burst per segment (each leaves as a datagram of its own)."""
        last = self.count - 1
        out = []
        for i in range(self.count):
            n = self.last_payload_bytes if i == last else self.payload_bytes
            out.append(
                Burst(
                    self.dest_qp,
                    (self.psn + i) & PSN_MASK,
                    1,
                    self.last_segment_bytes if i == last else self.segment_bytes,
                    n,
                    n,
                    self.opcodes[i : i + 1],
                    [0] if i in self.ack_req_at else [],
                    0,
                    None if self.packets is None else [self.packets[i]],
                    self.tag if self.tags is None else self.tags[i],
                )
            )
        return out

    def to_packets(self) -> list[DataPacket]:
        """The segments as descriptors (message offsets are not on the wire: 0 here unless the
        burst carries its packets)."""
        if self.packets is not None:
            return list(self.packets)
        acks = set(self.ack_req_at)
        last = self.count - 1
        return [
            DataPacket(
                self.dest_qp,
                (self.psn + i) & PSN_MASK,
                op,
                i in acks,
                self.last_payload_bytes if i == last else self.payload_bytes,
            )
            for i, op in enumerate(self.opcodes)
        ]
