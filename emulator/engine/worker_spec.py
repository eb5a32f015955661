"""What a worker is given: its shard of ranks, the flows they send and the run's parameters.

Its own module so that the coordinator, the launchers and a worker's parts can name it without
importing the worker process (emulator/engine/worker.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.engine.params import EngineParams
from emulator.engine.plan import EngineFlow, RankEndpoint
from emulator.transport.params import TransportParams
from emulator.transport.qp_profile import DEFAULT_PROFILE, QpProfile

# A queue pair the plan uses, opened before the clock starts: (connection id, src rank, dst rank,
# QP index, UDP source port, QP profile); the sender's worker opens its send half, the
# receiver's its receive half (emulator.schedule.ideal.IdealResult.queue_pairs)
QueuePairAhead = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, picklable (it crosses into a spawned process)."""

    index: int
    ranks: tuple[RankEndpoint, ...]
    addresses: dict[int, str]  # every rank's address (destinations)
    flows: tuple[EngineFlow, ...]  # flows whose src rank is in this shard
    connections: dict[tuple[int, int, int, int], int]  # EngineFlow.connection_key -> conn id
    transport: TransportParams
    engine: EngineParams
    profiles: tuple[QpProfile, ...] = (DEFAULT_PROFILE,)  # EngineFlow.profile -> how its QP sends
    relay: frozenset[int] = frozenset()  # flow ids other workers wait for: report at once
    ahead: tuple[QueuePairAhead, ...] = ()  # queue pairs of its ranks to open before the start
