"""SendQueuePair.on_acks over the ACKs of several reads at once (the native receive path joins
the ACK reads in a row for one QP) leaves the same state and events as one call per read."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.transport.params import TransportParams
from emulator.transport.sender import SendQueuePair


def _state(qp: SendQueuePair) -> tuple[object, ...]:
    return (
        qp.events,
        qp.bytes_acked,
        qp.acks_received,
        qp.drops,
        qp.next_transmit_s(),
        qp.next_timer_s(),
        qp.idle,
        qp._una_seq,
        qp._resend_seq,
    )


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40_000), min_size=1, max_size=4),
    reads=st.lists(st.lists(st.integers(-40, 120), min_size=1, max_size=5), max_size=8),
    initial_psn=st.integers((1 << 24) - 50, (1 << 24) - 1),
)
def test_acks_of_several_reads_in_one_call(
    sizes: list[int], reads: list[list[int]], initial_psn: int
) -> None:
    qp = SendQueuePair(
        qpn=1,
        dest_qp=2,
        params=TransportParams(congestion_control="none", path_mtu_bytes=1024),
        line_rate_bps=1e12,
        initial_psn=initial_psn,
    )
    for i, size in enumerate(sizes):
        qp.post_send(now=0.0, message_id=i, size_bytes=size)
    while qp.poll_burst(now=1.0, floor_s=0.0, max_packets=64) is not None:
        pass
    # ACKed PSNs as offsets from the first (some behind it, some never sent: on_ack's cases)
    psns = [[(initial_psn + d) & 0xFFFFFF for d in read] for read in reads]
    apart, joined = qp, copy.deepcopy(qp)
    for read in psns:
        apart.on_acks(now=2.0, psns=read)
    joined.on_acks(now=2.0, psns=[p for read in psns for p in read])
    assert _state(joined) == _state(apart)
