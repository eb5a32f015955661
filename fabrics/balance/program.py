"""The balancer program: compiled (cached), attached at tc clsact ingress, found again by id.

As the ECN marker (fabrics/ecn/ebpf.py), tc loads the object once per filter, so each port has
its own program instance and maps; they are found through `bpftool net show` in the switch's
namespace (program id and interface index per port) and `bpftool prog show` (its map ids).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import EnvironmentProblem
from emulator.native.bpf_object import compiled
from fabrics.balance.maps import FLOWLET_ENTRIES
from fabrics.ecn import ebpf
from fabrics.iproute import Cmd, run, tc

SOURCE = Path(__file__).with_name("balancer.c")
SECTION = "tc"
HOOK = "clsact/ingress"  # bpftool's name for a tc filter at clsact ingress
MAP_NAMES = (
    "params",
    "counters",
    "nexthops",
    "turns",
    "flowlets",
    "queues",
    "switch_turns",
    "switch_flows",
)


def compiled_object(*, flowlets: bool, capacity: int) -> Path:
    """The balancer object, built at first use and cached by source hash, for `capacity` next
    hops per route (maps.hop_capacity). The flowlet variant has a real flowlet table (the others
    one entry, so a sprayed port holds no table); all size the `queues` template as the marker's
    state (ebpf.STATE), which the stem names so a changed marker never reuses a stale object."""
    entries = FLOWLET_ENTRIES if flowlets else 1
    state = ebpf.STATE.size
    return compiled(
        SOURCE,
        f"balancer-h{capacity}-f{entries}-s{state}",
        what="the eBPF load balancer",
        defines=[
            f"MAX_NEXTHOPS={capacity}",
            f"MARKER_STATE_BYTES={state}",
            f"FLOWLET_ENTRIES={entries}",
        ],
    )


def clsact_command(netns: str, dev: str) -> Cmd:
    return tc("qdisc", "add", "dev", dev, "clsact", netns=netns)


def attach_command(netns: str, dev: str, obj: Path) -> Cmd:
    args = ("filter", "add", "dev", dev, "ingress", "bpf", "da", "obj", str(obj), "sec", SECTION)
    return tc(*args, netns=netns)


@dataclass(frozen=True)
class PortProgram:
    """The balancer instance at one port's ingress: its program and map ids."""

    dev: str
    ifindex: int
    prog_id: int
    maps: dict[str, int]


def discover(netns: str) -> dict[str, tuple[int, int]]:
    """Interface -> (program id, interface index) of every program at clsact ingress in one
    namespace (the balancer is the only one the fabric puts there)."""
    out = run(Cmd("bpftool", ("-j", "net", "show"), netns))
    found: dict[str, tuple[int, int]] = {}
    for section in json.loads(out or "[]"):
        for entry in section.get("tc", []):
            if entry.get("kind") == HOOK:
                found[entry["devname"]] = (int(entry["id"]), int(entry["ifindex"]))
    return found


def map_ids(prog_ids: list[int]) -> dict[int, dict[str, int]]:
    """Program id -> its maps by name (one bpftool call for all programs)."""
    progs = json.loads(run(Cmd("bpftool", ("-j", "prog", "show"))) or "[]")
    maps = json.loads(run(Cmd("bpftool", ("-j", "map", "show"))) or "[]")
    name_of = {m["id"]: m.get("name", "") for m in maps}
    wanted = set(prog_ids)
    out: dict[int, dict[str, int]] = {}
    for prog in progs:
        if prog["id"] in wanted:
            named = {name_of.get(i, ""): int(i) for i in prog.get("map_ids", [])}
            missing = [n for n in MAP_NAMES if n not in named]
            if missing:
                raise EnvironmentProblem(
                    f"balancer program {prog['id']} lacks its map {missing[0]} after attach"
                )
            out[int(prog["id"])] = {n: named[n] for n in MAP_NAMES}
    gone = wanted - set(out)
    if gone:
        raise EnvironmentProblem(f"balancer programs {sorted(gone)} vanished after attach")
    return out


def port_programs(netns: str, devs: list[str]) -> dict[str, tuple[int, int]]:
    """`devs`' (program id, ifindex) in `netns`, refusing a port the program is missing from."""
    found = discover(netns)
    for dev in devs:
        if dev not in found:
            raise EnvironmentProblem(
                f"no balancer program at {dev} ingress in {netns} after attach"
            )
    return {dev: found[dev] for dev in devs}
