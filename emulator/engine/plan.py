"""What the engine needs from a plan: ranks (address, namespace, line rate) and flows.

The engine does not depend on the schedule's internals: an EngineFlow is the handful of fields it
uses, and `from_schedule_flow` adapts emulator.schedule.plan.Flow. Times and rates are in the
TARGET timescale (the engine applies time dilation itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from emulator.errors import PlanError
from emulator.schedule.driver import FlowLike

MAX_CONNECTIONS = (1 << 24) - 2  # QP numbers are 24 bits; 0 is avoided


@dataclass(frozen=True, slots=True)
class RankEndpoint:
    """Where a rank lives: its IPv4 address, its network namespace, its NIC's line rate.

    `netns` is a name under /run/netns, an absolute path to a namespace file (a Mininet host's
    /proc/PID/ns/net), or None for the namespace the engine runs in. `line_rate_bps` is the
    target rate the congestion control starts from and never exceeds. Ranks with the same
    `nic` (a tester's many endpoints behind one port) share one transmit arbiter at that rate
    and run in one worker."""

    rank: int
    address: str
    netns: str | None = None
    line_rate_bps: float = 100e9
    nic: int | None = None  # ranks naming the same NIC share it (and its line rate)


@dataclass(frozen=True, slots=True)
class EngineFlow:
    """One message on one queue pair. It is posted `start_delay_s` (target time, e.g. a compute
    delay) after the last flow in `deps` completed (after the start when it has none)."""

    id: int
    src: int
    dst: int
    qp: int
    udp_sport: int
    bytes: int
    deps: tuple[int, ...] = ()
    start_delay_s: float = 0.0
    profile: int = 0  # index into the run's QpProfile table
    tag: int = 0  # attribution tag its packets carry (emulator.transport.packets; 0: none)

    @property
    def connection_key(self) -> tuple[int, int, int, int]:
        """Flows with the same key are messages on one queue pair, posted in readiness order."""
        return (self.src, self.dst, self.qp, self.udp_sport)


def from_schedule_flow(flow: FlowLike, start_delay_s: float = 0.0) -> EngineFlow:
    """Adapt a schedule Flow (or anything with its fields)."""
    return EngineFlow(
        flow.id,
        flow.src,
        flow.dst,
        flow.qp,
        flow.udp_sport,
        flow.bytes,
        tuple(flow.deps),
        start_delay_s,
        flow.profile,
    )


def check_plan(flows: Sequence[EngineFlow], ranks: Iterable[RankEndpoint]) -> None:
    """Raise PlanError naming the flow when a plan cannot run: unknown rank, bad size or port,
    a dependency on a flow not in the plan, a dependency cycle."""
    known = {r.rank for r in ranks}
    ids: set[int] = set()
    for f in flows:
        if f.id in ids:
            raise PlanError(f"flow {f.id}: id appears twice in the plan")
        ids.add(f.id)
    for f in flows:
        for rank, role in ((f.src, "src"), (f.dst, "dst")):
            if rank not in known:
                raise PlanError(f"flow {f.id}: {role} rank {rank} has no endpoint")
        if f.bytes <= 0:
            raise PlanError(f"flow {f.id}: bytes must be positive, got {f.bytes}")
        if not 0 < f.udp_sport < 65536:
            raise PlanError(f"flow {f.id}: udp_sport {f.udp_sport} is not a UDP port")
        if f.start_delay_s < 0:
            raise PlanError(f"flow {f.id}: start_delay_s must not be negative")
        for dep in f.deps:
            if dep not in ids:
                raise PlanError(f"flow {f.id}: depends on flow {dep}, which is not in the plan")
    _check_acyclic(flows)


def _check_acyclic(flows: Sequence[EngineFlow]) -> None:
    waiting = {f.id: len(set(f.deps)) for f in flows}
    dependents: dict[int, list[int]] = {}
    for f in flows:
        for dep in set(f.deps):
            dependents.setdefault(dep, []).append(f.id)
    ready = [fid for fid, n in waiting.items() if n == 0]
    done = 0
    while ready:
        fid = ready.pop()
        done += 1
        for child in dependents.get(fid, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if done != len(flows):
        stuck = sorted(fid for fid, n in waiting.items() if n > 0)[:5]
        raise PlanError(f"flows {stuck}: dependency cycle, they can never start")
