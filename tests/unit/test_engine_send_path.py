"""The worker's send side when the kernel refuses a GSO send: the packets are lost as on a
congested NIC (counted by why, never raised), and `gso_sends` counts only sends the kernel took."""

from __future__ import annotations

import errno
from collections import Counter
from types import SimpleNamespace
from typing import Any

from emulator.engine.send_path import SendPath
from emulator.transport.burst import Burst


class _Socket:
    def __init__(self, error: OSError | None) -> None:
        self.error = error
        self.sent = 0

    def sendmsg(self, *_args: Any) -> int:
        if self.error is not None:
            raise self.error
        self.sent += 1
        return 0


class _Sender(SendPath):
    def __init__(self) -> None:
        self.offloads = SimpleNamespace(gso=True)  # type: ignore[assignment]
        self.counters = Counter()
        self.latency = False
        self.gso_view = memoryview(bytearray(65536))
        self._gso_cmsgs = {}

    def _count_class(self, tos: int, packets: int, udp_bytes: int, *, sent: bool) -> None:
        del tos, packets, udp_bytes, sent


def _conn(sock: _Socket) -> Any:
    writer = SimpleNamespace(write=lambda burst, gso: burst.count * burst.segment_bytes)
    rank = SimpleNamespace(tx_bytes=0, spec=SimpleNamespace(rank=0))
    return SimpleNamespace(
        writer=writer, sock=sock, tos=0, tos_cmsgs=(), dest=("10.0.0.2", 4791), rank=rank
    )


BURST = Burst(
    dest_qp=1,
    psn=0,
    count=4,
    segment_bytes=1024,
    payload_bytes=996,
    last_payload_bytes=996,
    opcodes=bytes(4),
    ack_req_at=[3],
)


def test_a_refused_gso_send_is_counted_by_reason_not_as_a_send() -> None:
    sender = _Sender()
    sender._send_burst(_conn(_Socket(None)), BURST)
    sender._send_burst(_conn(_Socket(BlockingIOError(errno.EAGAIN, "full"))), BURST)
    sender._send_burst(_conn(_Socket(OSError(errno.ENOBUFS, "no buffer space"))), BURST)
    assert sender.counters["gso_sends"] == 1
    assert sender.counters["send_buffer_full"] == 1
    assert sender.counters["send_no_buffers"] == 1
