"""The eBPF phantom-queue marker: compile (cached), attach at tc clsact egress, parameters, counters.

Used where the kernel has no tc RED (docs/architecture.md, "This kind of kernel"). Each port gets
its own program instance and maps (tc loads the object once per filter), so a port's parameters
and counters live in that port's `params` and `state` maps; struct layouts mirror
phantom_marker.c.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import EnvironmentProblem
from emulator.native.bpf_object import compiled
from fabrics.ecn.bpf_syscall import BpfMap
from fabrics.iproute import Cmd, run, tc

SOURCE = Path(__file__).with_name("phantom_marker.c")
SECTION = "tc"
PROG_NAME = "phantom_marker"
# struct marker_params: u64 drain_bytes_per_ns_q24, kmin, kmax, buffer; u32 pmax_u32, enabled,
# loss_u32, mark_ect; u64 xoff_bytes, overhead_bytes
PARAMS = struct.Struct("=QQQQIIIIQQ")
# struct marker_state: spin lock u32, pad u32, 12 x u64, last_class u32, pad u32, then the
# per-class counters (see phantom_marker.c)
ATTR_CLASSES = 64
CLASS = struct.Struct("=7Q")  # struct class_counters
STATE_HEAD = struct.Struct("=II12QII")
STATE = struct.Struct(f"={STATE_HEAD.format[1:]}{ATTR_CLASSES * 7}Q")
KEY0 = struct.pack("=I", 0)


@dataclass(frozen=True)
class MarkerParams:
    rate_bps: float
    kmin_bytes: int
    kmax_bytes: int
    pmax: float
    buffer_bytes: int
    enabled: bool = True
    loss_probability: float = 0.0
    mark_ect: bool = True  # False: the program only drops (loss on a port without ECN)
    xoff_bytes: int = 0  # PFC XOFF: the program counts time at or above it (0: not counted)
    overhead_bytes: int = 0  # wire bytes per frame beyond skb->len: the queue counts them

    def pack(self) -> bytes:
        drain_q24 = round(self.rate_bps / 8 / 1e9 * (1 << 24))
        pmax_u32 = min(round(self.pmax * 0xFFFFFFFF), 0xFFFFFFFF)
        loss_u32 = min(round(self.loss_probability * (1 << 32)), 0xFFFFFFFF)
        return PARAMS.pack(
            max(drain_q24, 1),
            self.kmin_bytes,
            self.kmax_bytes,
            self.buffer_bytes,
            pmax_u32,
            int(self.enabled),
            loss_u32,
            int(self.mark_ect),
            self.xoff_bytes,
            self.overhead_bytes,
        )


@dataclass(frozen=True)
class ClassCounters:
    """One attribution class's counters at one port since attach (phantom_marker.c, struct
    class_counters): its bytes (skb->len), packets, ECN marks, overflows, the queue byte-time its
    packets held (`byte_time_q6`: sum of len x (queue found + len / 2) / 64, wire bytes), and the
    time at or above XOFF charged to it and the rises to XOFF it made."""

    bytes: int = 0
    packets: int = 0
    marks: int = 0
    overflows: int = 0
    byte_time_q6: int = 0
    pause_ns: int = 0
    pause_events: int = 0

    def queue_byte_s(self, rate_bps: float) -> float:
        """Bytes x seconds of the phantom queue this class's packets held (drain rate rate_bps)."""
        return self.byte_time_q6 * 64 * 8 / rate_bps


@dataclass(frozen=True)
class MarkerState:
    """Counters of one port's marker since attach (queue values are the phantom queue's).
    `queue_bytes` is the queue as the last packet left it; `queue_bytes_at` drains it to now.
    `classes[c]`: attribution class c's share of the counters (they sum to the port's)."""

    last_ns: int
    queue_bytes: int
    peak_queue_bytes: int
    tx_bytes: int
    packets: int
    ect_packets: int
    marks: int
    overflows: int
    loss_drops: int = 0
    pause_ns: int = 0  # at or above XOFF, up to the last packet (pause_ns_at adds the rest)
    pause_events: int = 0
    above_xoff: int = 0
    last_class: int = 0
    classes: tuple[ClassCounters, ...] = ()

    @classmethod
    def unpack(cls, raw: bytes) -> MarkerState:
        _, _, *fields, last_class, _ = STATE_HEAD.unpack_from(raw)
        classes = tuple(
            ClassCounters(*CLASS.unpack_from(raw, STATE_HEAD.size + i * CLASS.size))
            for i in range(ATTR_CLASSES)
        )
        counters = cls(*fields)
        return dataclasses.replace(counters, last_class=last_class, classes=classes)

    def queue_bytes_at(self, now_ns: int, rate_bps: float) -> int:
        """The phantom queue drained to `now_ns` (bpf_ktime_get_ns is CLOCK_MONOTONIC, which
        time.monotonic_ns() reads too)."""
        drained = max(0, now_ns - self.last_ns) * rate_bps / 8e9
        return max(0, int(self.queue_bytes - drained))

    def pause_ns_at(self, now_ns: int, rate_bps: float, xoff_bytes: int) -> int:
        """Time at or above XOFF up to `now_ns`: the counter, plus the drain since the last
        packet while the queue was still above XOFF."""
        if not self.above_xoff or self.queue_bytes <= xoff_bytes:
            return self.pause_ns
        to_xoff_ns = (self.queue_bytes - xoff_bytes) * 8e9 / rate_bps
        return self.pause_ns + int(min(max(0, now_ns - self.last_ns), to_xoff_ns))

    def classes_at(
        self, now_ns: int, rate_bps: float, xoff_bytes: int
    ) -> tuple[ClassCounters, ...]:
        """The per-class counters with the time above XOFF since the last packet (what
        pause_ns_at adds) charged to that packet's class, as the program will."""
        tail = self.pause_ns_at(now_ns, rate_bps, xoff_bytes) - self.pause_ns if xoff_bytes else 0
        if not tail or not self.classes:
            return self.classes
        out = list(self.classes)
        last = out[self.last_class]
        out[self.last_class] = dataclasses.replace(last, pause_ns=last.pause_ns + tail)
        return tuple(out)


def compiled_object(*, trace: bool = False, classes: bool = True) -> Path:
    """The marker object, compiled with clang at first use and cached by source hash.

    `trace` builds the test variant that records every packet in its `trace` map
    (phantom_marker.c, PHANTOM_TRACE); `classes=False` the variant that counts no attribution
    classes (PHANTOM_NO_CLASSES: bench/marker_cost.py's peer); runs never use either."""
    variant = ("-trace" if trace else "") + ("" if classes else "-noclasses")
    defines = (["PHANTOM_TRACE"] if trace else []) + ([] if classes else ["PHANTOM_NO_CLASSES"])
    return compiled(SOURCE, f"phantom_marker{variant}", what="the eBPF ECN marker", defines=defines)


def attach_commands(netns: str, dev: str, obj: Path) -> list[Cmd]:
    return [
        tc("qdisc", "add", "dev", dev, "clsact", netns=netns),
        tc(
            "filter",
            "add",
            "dev",
            dev,
            "egress",
            "bpf",
            "da",
            "obj",
            str(obj),
            "sec",
            SECTION,
            netns=netns,
        ),
    ]


@dataclass(frozen=True)
class PortMaps:
    prog_id: int
    params_map_id: int
    state_map_id: int


def discover(netns: str) -> dict[str, int]:
    """Interface name -> id of the marker program attached at its egress, in one namespace."""
    out = run(Cmd("bpftool", ("-j", "net", "show"), netns))
    found: dict[str, int] = {}
    for section in json.loads(out or "[]"):
        for entry in section.get("tc", []):
            if entry.get("kind") == "clsact/egress":
                found[entry["devname"]] = int(entry["id"])
    return found


def maps_of(prog_ids: list[int]) -> dict[int, PortMaps]:
    """Program id -> its params/state map ids (one bpftool call for all programs)."""
    progs = json.loads(run(Cmd("bpftool", ("-j", "prog", "show"))) or "[]")
    maps = json.loads(run(Cmd("bpftool", ("-j", "map", "show"))) or "[]")
    name_of = {m["id"]: m.get("name", "") for m in maps}
    wanted = set(prog_ids)
    out: dict[int, PortMaps] = {}
    for prog in progs:
        if prog["id"] in wanted:
            ids = {name_of.get(i): i for i in prog.get("map_ids", [])}
            if "params" not in ids or "state" not in ids:
                raise EnvironmentProblem(f"marker program {prog['id']} lacks its params/state maps")
            out[prog["id"]] = PortMaps(prog["id"], ids["params"], ids["state"])
    missing = wanted - set(out)
    if missing:
        raise EnvironmentProblem(f"marker programs {sorted(missing)} vanished after attach")
    return out


def write_params(maps: PortMaps, params: MarkerParams) -> None:
    m = BpfMap(maps.params_map_id)
    try:
        m.update(KEY0, params.pack())
    finally:
        m.close()


def read_state(maps: PortMaps) -> MarkerState:
    m = BpfMap(maps.state_map_id)
    try:
        return MarkerState.unpack(m.lookup(KEY0, STATE.size, lock=True))
    finally:
        m.close()


def loaded_prog_ids() -> set[int]:
    progs = json.loads(run(Cmd("bpftool", ("-j", "prog", "show"))) or "[]")
    return {int(p["id"]) for p in progs}


def prog_tags(prog_ids: list[int]) -> dict[int, str]:
    progs = json.loads(run(Cmd("bpftool", ("-j", "prog", "show"))) or "[]")
    wanted = set(prog_ids)
    return {int(p["id"]): str(p.get("tag")) for p in progs if p["id"] in wanted}
