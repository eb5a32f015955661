"""Attribution on the emulated fabric, its pure parts: which class a collective gets
(emulator.planning.attribution), the marker's per-class counters as Python reads them
(fabrics.ecn.ebpf) and as the sampler turns them into events (emulator.backends.engine.sampling), with the
units worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from emulator.backends.engine.sampling import class_samples
from emulator.events import ClassCounts, PortClassSample
from emulator.planning.attribution import (
    OTHER,
    attribution_class,
    class_names,
    classes_json,
    seed_classes,
)
from emulator.schedule.plan import CollectiveInstance
from fabrics.ecn import ebpf


def _instance(collective: str, id_: int = 0) -> CollectiveInstance:
    return CollectiveInstance(id_, 0, collective, "", (0, 1), 1024, "ring", (), ())


def test_a_plan_gets_one_class_per_collective_type_in_sorted_order() -> None:
    classes = seed_classes(["ALL_TO_ALL", "ALL_REDUCE", "ALL_TO_ALL"])
    assert classes == {"ALL_REDUCE": 1, "ALL_TO_ALL": 2}
    assert attribution_class(_instance("ALL_TO_ALL"), classes) == 2
    assert attribution_class(_instance("ALL_REDUCE", 7), classes) == 1
    # a type the plan did not have takes the next class
    assert attribution_class(_instance("SEND_RECV"), classes) == 3
    assert class_names(classes) == {
        0: "UNTAGGED",
        1: "ALL_REDUCE",
        2: "ALL_TO_ALL",
        3: "SEND_RECV",
    }
    doc = classes_json(classes)
    assert doc["classes"] == {
        "0": "UNTAGGED",
        "1": "ALL_REDUCE",
        "2": "ALL_TO_ALL",
        "3": "SEND_RECV",
    }
    assert "warning" not in doc and "Resv6a" in doc["field"]


def test_beyond_63_types_the_rest_share_class_63_named_other_with_a_warning() -> None:
    exactly = seed_classes(f"T{i:02d}" for i in range(63))
    assert sorted(exactly.values()) == list(range(1, 64))  # 63 fit: each its own
    assert class_names(exactly)[63] == "T62"
    classes = seed_classes(f"T{i:02d}" for i in range(65))
    assert max(classes.values()) == OTHER == 63
    assert [k for k, c in classes.items() if c == OTHER] == ["T62", "T63", "T64"]
    assert attribution_class(_instance("LATE"), classes) == OTHER
    names = class_names(classes)
    assert names[62] == "T61" and names[63] == "OTHER"
    doc = classes_json(classes)
    assert doc["shared_other"] == ["LATE", "T62", "T63", "T64"]
    assert "4 share class 63 (OTHER)" in doc["warning"]


def _state_bytes(
    head: tuple[int, ...], last_class: int, classes: dict[int, tuple[int, ...]]
) -> bytes:
    raw = bytearray(ebpf.STATE.size)
    ebpf.STATE_HEAD.pack_into(raw, 0, 0, 0, *head, last_class, 0)
    for c, values in classes.items():
        ebpf.CLASS.pack_into(raw, ebpf.STATE_HEAD.size + c * ebpf.CLASS.size, *values)
    return bytes(raw)


def test_the_marker_state_carries_64_classes_after_the_port_counters() -> None:
    # the struct sizes of phantom_marker.c: 112-byte head, 64 x 56-byte class counters
    assert ebpf.STATE_HEAD.size == 112 and ebpf.CLASS.size == 56 and ebpf.STATE.size == 3696
    # queue 400 kB at the last packet, 1 ms ago, above XOFF 300 kB at 8 Gb/s (1 byte/ns):
    # 100 us more above XOFF since, charged to class 2 (the last packet's)
    head = (10**6, 400_000, 500_000, 9000, 6, 6, 3, 1, 0, 5000, 2, 1)
    raw = _state_bytes(head, 2, {1: (3000, 2, 1, 0, 64, 1000, 1), 2: (6000, 4, 2, 1, 128, 4000, 1)})
    state = ebpf.MarkerState.unpack(raw)
    assert (state.tx_bytes, state.packets, state.marks, state.pause_ns) == (9000, 6, 3, 5000)
    assert state.last_class == 2 and len(state.classes) == 64
    assert state.classes[1] == ebpf.ClassCounters(3000, 2, 1, 0, 64, 1000, 1)
    assert state.classes[2].marks == 2 and state.classes[0] == ebpf.ClassCounters()
    now_ns = 10**6 + 10**6
    assert state.pause_ns_at(now_ns, 8e9, 300_000) == 5000 + 100_000
    classes = state.classes_at(now_ns, 8e9, 300_000)
    assert classes[2].pause_ns == 4000 + 100_000 and classes[1].pause_ns == 1000
    # byte-time: 128 x 64 bytes^2 over 1 byte/ns is 8192 byte-ns
    assert state.classes[2].queue_byte_s(8e9) == pytest.approx(8192e-9)


@dataclass
class _Port:
    node: str
    dev: str
    rate_bps: float
    by_class: tuple[ebpf.ClassCounters, ...] | None
    pause_s: float | None = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def test_class_samples_convert_to_target_time_and_name_the_classes() -> None:
    classes = [ebpf.ClassCounters()] * 64
    # 1 Gb/s of wall rate = 0.125 byte/ns: 1000 units of 64 bytes^2 = 512000 byte-ns
    classes[1] = ebpf.ClassCounters(5000, 4, 2, 1, 1000, 3_000_000, 1)
    classes[9] = ebpf.ClassCounters(100, 1, 0, 0, 0, 0, 0)
    ports = [
        _Port("l0", "l0-s0", 1e9, tuple(classes)),
        _Port("l0", "l0-h0", 1e9, tuple([ebpf.ClassCounters()] * 64), pause_s=None),  # idle
        _Port("l1", "l1-s0", 1e9, None),  # another marker: no classes
    ]
    samples = class_samples(ports, 0.5, tdf=1000.0, names={1: "ALL_REDUCE"})
    assert samples == [
        PortClassSample(
            0.5,
            "l0",
            "l0-s0",
            (
                ClassCounts(1, "ALL_REDUCE", 5000, 4, 2, 1, pytest.approx(512e-9), 3e-6, 1),
                ClassCounts(9, "class 9", 100, 1, 0, 0, 0.0, 0.0, 0),
            ),
        ),
        # an idle port still sends its (empty) sample: the baseline its first window counts from
        PortClassSample(0.5, "l0", "l0-h0", ()),
    ]


def test_with_several_jobs_a_class_is_one_job_s_type_named_job_slash_type() -> None:
    import dataclasses

    dense = dataclasses.replace(_instance("ALL_REDUCE"), job="dense")
    moe = dataclasses.replace(_instance("ALL_TO_ALL"), job="moe")
    other_ar = dataclasses.replace(_instance("ALL_REDUCE"), job="moe")
    classes = seed_classes([("dense", "ALL_REDUCE"), ("moe", "ALL_TO_ALL")])
    assert attribution_class(dense, classes, by_job=True) == 1
    assert attribution_class(moe, classes, by_job=True) == 2
    assert attribution_class(other_ar, classes, by_job=True) == 3  # the same type, another job
    # a traffic pattern's message has no job: its type alone
    assert attribution_class(_instance("SEND_RECV"), classes, by_job=True) == 4
    assert class_names(classes)[3] == "moe/ALL_REDUCE"
    assert classes_json(classes)["key"] == "job/collective type"
    # without by_job the same instances share their type's class
    by_type = seed_classes(["ALL_REDUCE"])
    assert attribution_class(dense, by_type) == attribution_class(other_ar, by_type) == 1
