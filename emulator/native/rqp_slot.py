"""A receive queue pair's common path as a C slot holds it (burst_drain.c's drain_rqp_t, the
simulator's fab_rqp_t in simfab_rqp.h: the same field names), synchronised with the Python
ReceiveQueuePair both ways: what C took folded in, Python's state written back."""

from __future__ import annotations

from typing import Any

from emulator.transport.receiver import ReceiveQueuePair


def fold_taken(receiver: ReceiveQueuePair, slot: Any) -> None:
    """Fold the packets C took on `receiver`'s common path into it, and zero the slot's tallies."""
    receiver.took_common_path(
        int(slot.packets),
        int(slot.bytes),
        int(slot.expected_psn),
        int(slot.highest_psn),
        acks=int(slot.acks),
    )
    slot.packets = slot.bytes = slot.acks = 0


def write_state(receiver: ReceiveQueuePair, slot: Any) -> None:
    """Copy the receiver's state to its slot after Python handled one of its packets."""
    expected, highest, in_message, eligible = receiver.common_path()
    slot.expected_psn, slot.highest_psn = expected, highest
    slot.in_message, slot.eligible = in_message, eligible
    slot.msn = receiver.message_index
