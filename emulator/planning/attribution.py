"""Attribution classes: which collectives' packets the emulated fabric's switches count together.

On the emulated fabric the engine writes a class into every data packet it sends, in the 6
reserved bits of the BTH byte after the P_Key (emulator.transport.packets.ATTRIBUTION_TAG_AT),
and each switch port's eBPF marker keeps its counters per class (fabrics/ecn/phantom_marker.c):
bytes, packets, ECN marks, overflows, the queue's byte-time and the time above XOFF. Six bits
give 64 values: 0 is untagged (ACKs, NAKs, CNPs, anything not RoCEv2), 1..63 are classes.

A class is a collective type (ALL_REDUCE, ALL_TO_ALL, ...; a traffic pattern's messages are
SEND_RECV), or with several jobs on the fabric a (job, collective type), named `job/TYPE`, so the
switches count each job apart: `attribution_class` is the one place that says so. Instance-level attribution (which instance
held the queue) needs more than 6 bits: it stays the simulator's. More keys than 63: the 63rd
and every later one share class 63, named OTHER, and the results say so.

The cost of the field: none on the wire (the byte is there, and the ICRC masks it to ones, so
no CRC work either); a DUT run leaves it 0 (IBA transmits reserved bits as 0, and a switch
under test has no use for ours).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from emulator.schedule.plan import CollectiveInstance
from emulator.transport.packets import ATTRIBUTION_TAG_MASK

UNTAGGED = 0
OTHER = ATTRIBUTION_TAG_MASK  # 63: shared by every key beyond the 62nd when there are 64+
UNTAGGED_NAME = "UNTAGGED"
OTHER_NAME = "OTHER"
FIELD = (
    "RoCEv2 BTH byte 4 (after the P_Key): its 6 reserved bits (Resv6a, below FECN and BECN); "
    "the ICRC masks that byte to ones (IBA vol. 1 7.8.1, annex A17), so the tag costs no CRC "
    "work and no wire bytes"
)


def class_key(instance: CollectiveInstance, by_job: bool) -> Hashable:
    """What a class stands for: the collective type, or (job, type) with several jobs."""
    return (instance.job, instance.collective) if by_job and instance.job else instance.collective


def attribution_class(
    instance: CollectiveInstance, classes: dict[Hashable, int], by_job: bool = False
) -> int:
    """The class of the instance's packets: its key's class in `classes` (class_key), or the
    next free one (added to `classes`); from the 63rd key on, OTHER."""
    key = class_key(instance, by_job)
    found = classes.get(key)
    if found is None:
        found = classes[key] = min(len(classes) + 1, OTHER)
    return found


def seed_classes(keys: Iterable[Hashable]) -> dict[Hashable, int]:
    """The classes of a plan's keys (sorted, so a plan gives the same numbers every run), for
    attribution_class to look up and extend."""
    classes: dict[Hashable, int] = {}
    for key in sorted(set(keys), key=str):
        classes[key] = min(len(classes) + 1, OTHER)
    return classes


def _key_name(key: Hashable) -> str:
    return "/".join(map(str, key)) if isinstance(key, tuple) else str(key)


def class_names(classes: Mapping[Hashable, int]) -> dict[int, str]:
    """Class -> its name: the key's, OTHER where several keys share it, UNTAGGED for 0."""
    members: dict[int, list[Hashable]] = {}
    for key, c in classes.items():
        members.setdefault(c, []).append(key)
    names = {UNTAGGED: UNTAGGED_NAME}
    for c, keys in members.items():
        names[c] = _key_name(keys[0]) if len(keys) == 1 else OTHER_NAME
    return dict(sorted(names.items()))


def classes_json(classes: Mapping[Hashable, int]) -> dict[str, Any]:
    """summary.json's `attribution_classes`: the field, each class's name, and which keys share
    OTHER (with a warning) when there were more than 63."""
    names = class_names(classes)
    shared = sorted(_key_name(k) for k, c in classes.items() if names[c] == OTHER_NAME)
    by_job = any(isinstance(k, tuple) for k in classes)
    out: dict[str, Any] = {
        "field": FIELD,
        "key": "job/collective type" if by_job else "collective type",
        "classes": {str(c): name for c, name in names.items()},
    }
    if shared:
        out["shared_other"] = shared
        out["warning"] = (
            f"{len(classes)} collective types for {OTHER} classes: {len(shared)} share class "
            f"{OTHER} ({OTHER_NAME}); the switches cannot tell them apart"
        )
    return out


__all__ = [
    "FIELD",
    "OTHER",
    "OTHER_NAME",
    "UNTAGGED",
    "UNTAGGED_NAME",
    "attribution_class",
    "class_key",
    "class_names",
    "classes_json",
    "seed_classes",
]
