"""Collective instance -> flows: pick the algorithm, map positions to ranks, chunk, split over QPs.

A queue pair delivers its messages in order, so a flow also waits for the previous flow of the
same instance on its (src, dst, qp); chunks of one transfer thus go one after the other, and chunk c of a transfer waits for the chunk of each dependency that covers the same fraction of
the data, so forwarding algorithms pipeline. A zero-byte transfer (a block smaller than n bytes)
sends nothing and passes its dependencies on.
"""

from __future__ import annotations

from collections.abc import Sequence

from emulator.errors import PlanError
from emulator.schedule.algorithms import ALGORITHMS, algorithm_family
from emulator.schedule.params import CollectivesParams
from emulator.schedule.plan import Flow, NodeRef, Transfer
from emulator.schedule.sports import SportPolicy


def transfers_for(
    collective: str, algorithm: str, n: int, size_bytes: int, root: int, params: CollectivesParams
) -> list[Transfer]:
    family = algorithm_family(collective)
    try:
        function = ALGORITHMS[family][algorithm]
    except KeyError:
        raise PlanError(f"no algorithm {algorithm!r} for {collective}") from None
    parameter = {
        "ALL_TO_ALL": params.alltoall_max_peers_in_flight,
        "BARRIER": params.barrier_message_bytes,
    }.get(family, 0)
    return function(n, size_bytes, root, parameter)


def _chunks(nbytes: int, chunk_bytes: int) -> list[int]:
    if nbytes <= 0:
        return []
    if chunk_bytes <= 0 or nbytes <= chunk_bytes:
        return [nbytes]
    count = -(-nbytes // chunk_bytes)
    base, extra = divmod(nbytes, count)
    return [base + 1 if k < extra else base for k in range(count)]


class FlowExpander:
    """Turns transfers into flows with global flow ids, queue pairs and source ports."""

    def __init__(self, params: CollectivesParams, sports: SportPolicy) -> None:
        self.params = params
        self.sports = sports
        self.next_flow_id = 0

    def expand(
        self,
        transfers: Sequence[Transfer],
        members: Sequence[int],
        instance: int,
        iteration: int,
        nodes: Sequence[NodeRef],
        rendezvous: bool = True,
    ) -> list[Flow]:
        """`members[p]` is the rank at position p, `nodes[p]` its trace node.

        rendezvous: flows wait for both the sender's and the receiver's node to be issued
        (collectives: the receiver must have posted its buffer); otherwise only the sender's
        (eager point-to-point sends).
        """
        qps = self.params.qps_per_peer
        flows: list[Flow] = []
        # arrivals[t][c]: flow ids whose arrival means chunk c of transfer t has arrived.
        arrivals: list[list[tuple[int, ...]]] = []
        node_deps_cache: dict[tuple[int, int], tuple[NodeRef, ...]] = {}
        last_on_qp: dict[tuple[int, int, int], int] = {}
        for transfer in transfers:
            src, dst = members[transfer.src], members[transfer.dst]
            chunk_sizes = _chunks(transfer.bytes, self.params.chunk_bytes)
            if not chunk_sizes:
                passed: set[int] = set()
                for dep in transfer.deps:
                    for arrived in arrivals[dep]:
                        passed.update(arrived)
                arrivals.append([tuple(sorted(passed))])
                continue
            key = (transfer.src, transfer.dst)
            node_deps = node_deps_cache.get(key)
            if node_deps is None:
                pair = (nodes[transfer.src], nodes[transfer.dst])
                node_deps = node_deps_cache[key] = pair if rendezvous else pair[:1]
            count = len(chunk_sizes)
            mine: list[tuple[int, ...]] = []
            for c, chunk in enumerate(chunk_sizes):
                deps: set[int] = set(mine[c - 1]) if c else set()
                for dep in transfer.deps:
                    dep_chunks = arrivals[dep]
                    covering = min(len(dep_chunks) - 1, -(-(c + 1) * len(dep_chunks) // count) - 1)
                    deps.update(dep_chunks[covering])
                base, extra = divmod(chunk, qps)
                ids: list[int] = []
                for qp in range(qps):
                    part = base + 1 if qp < extra else base
                    if part == 0:
                        continue
                    previous = last_on_qp.get((src, dst, qp))
                    dep_tuple = tuple(sorted(deps if previous is None else deps | {previous}))
                    flow = Flow(
                        id=self.next_flow_id,
                        instance=instance,
                        iteration=iteration,
                        step=transfer.step,
                        src=src,
                        dst=dst,
                        qp=qp,
                        udp_sport=self.sports(src, dst, qp),
                        bytes=part,
                        deps=dep_tuple,
                        node_deps=node_deps,
                        chunk=c,
                    )
                    last_on_qp[(src, dst, qp)] = flow.id
                    self.next_flow_id += 1
                    flows.append(flow)
                    ids.append(flow.id)
                mine.append(tuple(ids))
            arrivals.append(mine)
        return flows
