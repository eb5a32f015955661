"""The link-event impairment: cables of a live Clos going down and up during a replay.

Times are the target's (microseconds after the replay starts) and happen at start + t x TDF on
the wall clock, from a thread. A cable goes down at both ends at once (the switches at its ends
stop using it, as a kernel drops next hops over a dead interface); `reroute_after_us` later every
switch gets the routes of the fabric without it (the control plane converged); when it comes back
the routes include it again at once. What was done, when, and which flows crossed a cable while
it was down go into the run's summary.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from emulator.errors import ScenarioError
from fabrics.spec import ClosSpec, LinkEventSpec
from fabrics.topology import Cable, Topology, cable_named


@dataclass(frozen=True)
class _Action:
    at_s: float  # target time after the replay starts
    kind: str  # "down", "reroute", "up"
    event: int  # index in the scenario's link_events


def resolve(spec: ClosSpec, topology: Topology) -> list[Cable]:
    """The cable of every event; an unknown port is a scenario error naming it."""
    cables = []
    for i, event in enumerate(spec.link_events):
        try:
            cables.append(cable_named(topology, event.port))
        except ValueError as exc:
            raise ScenarioError(f"fabric.link_events[{i}].port: {exc}") from None
    return cables


def plan_actions(events: Sequence[LinkEventSpec]) -> list[_Action]:
    actions = []
    for i, e in enumerate(events):
        actions.append(_Action(e.down_at_us * 1e-6, "down", i))
        reroute = (e.down_at_us + e.reroute_after_us) * 1e-6
        if e.up_at_us is None or reroute < e.up_at_us * 1e-6:
            actions.append(_Action(reroute, "reroute", i))
        if e.up_at_us is not None:
            actions.append(_Action(e.up_at_us * 1e-6, "up", i))
    order = {"down": 0, "reroute": 1, "up": 2}
    return sorted(actions, key=lambda a: (a.at_s, order[a.kind]))


class LinkEventRunner:
    """Runs the actions against a live fabric (anything with set_cable and reroute)."""

    def __init__(
        self,
        fabric: Any,
        events: Sequence[LinkEventSpec],
        cables: Sequence[Cable],
        tdf: float,
        say: Callable[[str], None] = lambda _m: None,
    ) -> None:
        self.fabric = fabric
        self.events = tuple(events)
        self.cables = tuple(cables)
        self.tdf = tdf
        self.say = say
        self.actions = plan_actions(self.events)
        self.applied: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._down: set[Cable] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, start_wall_s: float) -> None:
        """Begin at the replay's start (time.perf_counter() value)."""
        if not self.actions:
            return
        self._thread = threading.Thread(
            target=self._run, args=(start_wall_s,), name="link-events", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self, start_wall_s: float) -> None:
        for action in self.actions:
            wait = start_wall_s + action.at_s * self.tdf - time.perf_counter()
            if wait > 0 and self._stop.wait(wait):
                return
            try:
                self.apply(action, (time.perf_counter() - start_wall_s) / self.tdf)
            except Exception as exc:  # a failed action must not kill the run: record it
                self.errors.append(f"{action.kind} {self.events[action.event].port}: {exc}")

    def apply(self, action: _Action, now_s: float) -> None:
        event, cable = self.events[action.event], self.cables[action.event]
        if action.kind == "down":
            self._down.add(cable)
            self.fabric.set_cable(cable, up=False)
        elif action.kind == "up":
            self._down.discard(cable)
            self.fabric.set_cable(cable, up=True)
            self.fabric.reroute(self._down)
        else:
            self.fabric.reroute(self._down)
        self.applied.append(
            {"port": event.port, "action": action.kind, "planned_s": action.at_s, "at_s": now_s}
        )
        self.say(f"link {event.port} {action.kind} at {now_s * 1e6:.0f} us")

    def down_windows(self, end_s: float) -> list[tuple[Cable, float, float]]:
        """(cable, went down, came up or end_s) for every down that happened."""
        out = []
        for i, cable in enumerate(self.cables):
            port = self.events[i].port
            downs = [a["at_s"] for a in self.applied if a["port"] == port and a["action"] == "down"]
            ups = [a["at_s"] for a in self.applied if a["port"] == port and a["action"] == "up"]
            for d in downs:
                out.append((cable, d, min([u for u in ups if u >= d], default=end_s)))
        return out


def flows_crossing(
    topology: Topology,
    windows: Sequence[tuple[Cable, float, float]],
    flows: Sequence[dict[str, Any]],
) -> Counter[str]:
    """Flows (by collective type) whose path crosses a cable while it is down: planned on it (the
    all-up path) and in flight (started, not finished) at some moment of the window."""
    hops: dict[Cable, set[tuple[str, str]]] = {}
    for cable, _, _ in windows:
        hops[cable] = {(cable.a.node, cable.a.ifname), (cable.b.node, cable.b.ifname)}
    hit: Counter[str] = Counter()
    hosts = topology.hosts
    for f in flows:
        start, end = f.get("start_s"), f.get("end_s")
        if start is None:
            continue
        path = None
        for cable, down, up in windows:
            if start >= up or (end is not None and end <= down):
                continue
            if path is None:
                links = topology.path(hosts[f["src_rank"]], hosts[f["dst_rank"]], f["udp_sport"])
                path = {(link.src, link.src_ifname) for link in links}
            if path & hops[cable]:
                hit[f["collective_type"]] += 1
                break
    return hit
