"""A queue pair's tester counters as one row per half, in the column order the results'
queue_pairs table reads them (collectors.queue_pairs joins the halves): the engine's workers and
the simulator both build their rows here, so the order has one home.
"""

from __future__ import annotations

from emulator.transport.receiver import ReceiveQueuePair
from emulator.transport.sender import SendQueuePair

# Column order of the rows send_qp_counters and recv_qp_counters build.
SEND_QP_COLUMNS = (
    "data_packets_sent",
    "data_bytes_acked",
    "packets_retransmitted",
    "acks_received",
    "naks_received",
    "cnps_received",
    "sacks_received",
    "dscp",
)
RECV_QP_COLUMNS = (
    "data_packets_received",
    "data_bytes_received",
    "sequence_errors",
    "duplicates",
    "acks_sent",
    "naks_sent",
    "ce_received",
    "cnps_sent",
    "sacks_sent",
    "held_out_of_order",
    "reordered_packets",
    "reorder_extent_sum",
    "reorder_extent_max",
)


def send_qp_counters(qp: SendQueuePair, cnps_received: int, dscp: int) -> list[int]:
    """A sender half's counters in SEND_QP_COLUMNS order."""
    return [
        qp.packets_sent,
        qp.bytes_acked,
        qp.packets_retransmitted,
        qp.acks_received,
        qp.naks_received,
        cnps_received,
        qp.sacks_received,
        dscp,
    ]


def recv_qp_counters(qp: ReceiveQueuePair, cnps_sent: int) -> list[int]:
    """A receiver half's counters in RECV_QP_COLUMNS order."""
    return [
        qp.packets_received,
        qp.delivered_bytes,
        qp.drops["out_of_sequence"],
        qp.drops["duplicate"],
        qp.acks_sent,
        qp.naks_sent,
        qp.ce_packets,
        cnps_sent,
        qp.sacks_sent,
        qp.held_packets,
        qp.reordered_packets,
        qp.reorder_extent_sum,
        qp.reorder_extent_max,
    ]
