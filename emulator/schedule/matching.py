"""Matching communication nodes across ranks into collective instances and send/recv pairs.

Node ids are not aligned across ranks, so a collective instance is the k-th collective node of a
process group in each member's file (record order), per iteration. Process groups come from the
comm-group JSON, from PyTorch's `## process_group:init ##` metadata node, or are the whole world
when pg_name is empty. Sends and receives pair by (src, dst, tag) in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emulator.chakra.attrs import normalise_pg_id
from emulator.errors import PlanError
from emulator.schedule.nodes import NodeInfo, NodeKind
from emulator.schedule.plan import NodeRef

WORLD = ""  # group key of the whole world (empty pg_name)


@dataclass(frozen=True, slots=True)
class MatchedOp:
    """A communication operation every participant has read: ready to become flows."""

    iteration: int
    collective: str  # CollectiveCommType name or SEND_RECV
    group: str
    members: tuple[int, ...]
    size_bytes: int
    nodes: tuple[NodeRef, ...]
    root: int  # position in members
    rendezvous: bool


class GroupTable:
    """Process group name -> member ranks (in the order the group lists them)."""

    def __init__(
        self, world_size: int, comm_groups: Mapping[str, Sequence[int]], source: str = ""
    ) -> None:
        self.world_size = world_size
        self.world = tuple(range(world_size))
        self.source = source or "comm groups"
        self._groups: dict[str, tuple[int, ...]] = {}
        for name, ranks in comm_groups.items():
            self._groups[normalise_pg_id(str(name))] = self._check(str(name), ranks)

    def _check(self, name: str, ranks: Sequence[int]) -> tuple[int, ...]:
        members = tuple(int(r) for r in ranks)
        if len(set(members)) != len(members):
            raise PlanError(f"{self.source}: group {name!r} lists a rank twice: {list(members)}")
        bad = [r for r in members if not 0 <= r < self.world_size]
        if bad:
            raise PlanError(
                f"{self.source}: group {name!r} names rank(s) {bad} but the trace set has "
                f"{self.world_size} rank(s)"
            )
        return members

    def add_process_groups(self, groups: Mapping[str, tuple[int, ...] | None], where: str) -> None:
        """Groups from a PyTorch `## process_group:init ##` node (None: the world)."""
        saved, self.source = self.source, where
        try:
            for name, ranks in groups.items():
                if name not in self._groups:
                    self._groups[name] = self.world if ranks is None else self._check(name, ranks)
        finally:
            self.source = saved

    def members(
        self, pg_name: str | None, rank: int, node: NodeInfo, where: str
    ) -> tuple[str, tuple[int, ...]]:
        if pg_name is None:
            return WORLD, self.world
        members = self._groups.get(pg_name)
        if members is None:
            if self.world_size == 1:
                return pg_name, self.world  # a one-rank trace: every group is that rank
            known = ", ".join(sorted(self._groups)) or "none"
            raise PlanError(
                f"{where}: node {node.id} ({node.name!r}) uses process group {pg_name!r}, which "
                f"no comm-group file or process_group:init node defines (known: {known}); pass "
                "--comm-groups FILE"
            )
        if rank not in members:
            raise PlanError(
                f"{where}: node {node.id} ({node.name!r}) uses process group {pg_name!r} = "
                f"{list(members)}, which does not contain rank {rank}"
            )
        return pg_name, members


class _Slot:
    __slots__ = ("members", "nodes")

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members = members
        self.nodes: dict[int, NodeInfo] = {}


class Matcher:
    """Collects communication nodes as ranks read them; emits MatchedOps when complete."""

    def __init__(
        self,
        groups: GroupTable,
        on_match: Callable[[MatchedOp], None],
        where: Callable[[int], str],
    ) -> None:
        self.groups = groups
        self.on_match = on_match
        self.where = where
        self._counts: dict[tuple[int, int, str], int] = {}
        self._slots: dict[tuple[int, str, int], _Slot] = {}
        self._sends: dict[tuple[int, int, int, int], deque[NodeInfo]] = {}
        self._recvs: dict[tuple[int, int, int, int], deque[NodeInfo]] = {}

    def register(self, rank: int, iteration: int, node: NodeInfo) -> None:
        if node.kind == NodeKind.COLLECTIVE:
            self._collective(rank, iteration, node)
        elif node.kind in (NodeKind.SEND, NodeKind.RECV):
            self._p2p(rank, iteration, node)

    # -- collectives ---------------------------------------------------------------------------
    def _collective(self, rank: int, iteration: int, node: NodeInfo) -> None:
        assert node.comm is not None
        group, members = self.groups.members(node.comm.pg_name, rank, node, self.where(rank))
        count_key = (rank, iteration, group)
        k = self._counts.get(count_key, 0)
        self._counts[count_key] = k + 1
        slot_key = (iteration, group, k)
        slot = self._slots.get(slot_key)
        if slot is None:
            slot = self._slots[slot_key] = _Slot(members)
        slot.nodes[rank] = node
        if len(slot.nodes) == len(members):
            del self._slots[slot_key]
            self.on_match(self._check(iteration, group, k, slot))

    def _check(self, iteration: int, group: str, k: int, slot: _Slot) -> MatchedOp:
        members = slot.members
        nodes = [slot.nodes[r] for r in members]
        first = nodes[0].comm
        assert first is not None
        shapes = {(n.comm.collective, n.comm.size_bytes) for n in nodes if n.comm is not None}
        if len(shapes) > 1:
            listing = "; ".join(
                f"rank {r} node {n.id} {n.comm.collective} {n.comm.size_bytes} B ({self.where(r)})"
                for r, n in zip(members, nodes, strict=True)
                if n.comm is not None
            )
            raise PlanError(
                f"collective #{k} of process group {_group_label(group)} (iteration {iteration}) "
                f"differs across its ranks: {listing}"
            )
        size = first.size_bytes
        if size is None:
            if first.collective != "BARRIER":
                rank = members[0]
                raise PlanError(
                    f"{self.where(rank)}: node {nodes[0].id} ({first.collective}) has no comm_size"
                )
            size = 0
        if size < 0:
            raise PlanError(
                f"{self.where(members[0])}: node {nodes[0].id} has comm_size {size} < 0"
            )
        root = members.index(first.src) if first.src in members else 0
        return MatchedOp(
            iteration=iteration,
            collective=first.collective,
            group=group,
            members=members,
            size_bytes=size,
            nodes=tuple((r, n.id) for r, n in zip(members, nodes, strict=True)),
            root=root,
            rendezvous=True,
        )

    # -- point to point ------------------------------------------------------------------------
    def _p2p(self, rank: int, iteration: int, node: NodeInfo) -> None:
        assert node.comm is not None
        where = self.where(rank)
        world = self.groups.world_size
        if node.kind == NodeKind.SEND:
            peer, field = node.comm.dst, "comm_dst"
        else:
            peer, field = node.comm.src, "comm_src"
        if peer is None:
            verb = "sends to" if node.kind == NodeKind.SEND else "receives from"
            raise PlanError(
                f"{where}: {node.kind} node {node.id} ({node.name!r}) has no {field}, so the rank "
                f"it {verb} is unknown and it cannot be matched with a peer (chakra_generator "
                "writes such lone send/recv nodes)"
            )
        if not 0 <= peer < world:
            raise PlanError(
                f"{where}: {node.kind} node {node.id} has {field}={peer} but the trace set has "
                f"{world} rank(s)"
            )
        src, dst = (rank, peer) if node.kind == NodeKind.SEND else (peer, rank)
        if src == dst:
            raise PlanError(f"{where}: {node.kind} node {node.id} has rank {rank} as its own peer")
        key = (iteration, src, dst, node.comm.tag or 0)
        mine, theirs = (
            (self._sends, self._recvs) if node.kind == NodeKind.SEND else (self._recvs, self._sends)
        )
        waiting = theirs.get(key)
        if not waiting:
            mine.setdefault(key, deque()).append(node)
            return
        other = waiting.popleft()
        if not waiting:
            del theirs[key]
        send, recv = (node, other) if node.kind == NodeKind.SEND else (other, node)
        assert send.comm is not None and recv.comm is not None
        size = send.comm.size_bytes if send.comm.size_bytes is not None else recv.comm.size_bytes
        if size is None:
            raise PlanError(
                f"{self.where(src)}: send node {send.id} to rank {dst} has no comm_size "
                f"(nor has recv node {recv.id} on rank {dst})"
            )
        if recv.comm.size_bytes is not None and recv.comm.size_bytes != size:
            raise PlanError(
                f"send node {send.id} on rank {src} ({size} B) and recv node {recv.id} on rank "
                f"{dst} ({recv.comm.size_bytes} B) pair by (src, dst, tag) but differ in size"
            )
        self.on_match(
            MatchedOp(
                iteration=iteration,
                collective="SEND_RECV",
                group=f"p2p:{src}->{dst}",
                members=(src, dst),
                size_bytes=size,
                nodes=((src, send.id), (dst, recv.id)),
                root=0,
                # Sends are eager: ASTRA-sim's custom-collective traces post each rank's send
                # before its recv, which would deadlock if a send waited for the recv.
                rendezvous=False,
            )
        )

    # -- diagnostics ---------------------------------------------------------------------------
    def unmatched(self, limit: int = 6) -> list[str]:
        """Why communication could not complete: nodes still waiting for their partners."""
        out: list[str] = []
        for (iteration, group, k), slot in self._slots.items():
            have = sorted(slot.nodes)
            missing = [r for r in slot.members if r not in slot.nodes]
            sample = ", ".join(f"rank {r} node {slot.nodes[r].id}" for r in have[:4])
            out.append(
                f"collective #{k} of process group {_group_label(group)} (iteration {iteration}) "
                f"was issued by {sample} but rank(s) {missing} have no matching collective"
            )
        for (iteration, src, dst, tag), nodes in self._sends.items():
            out.append(
                f"send node {nodes[0].id} on rank {src} to rank {dst} (tag {tag}, iteration "
                f"{iteration}) has no matching recv on rank {dst}"
            )
        for (iteration, src, dst, tag), nodes in self._recvs.items():
            out.append(
                f"recv node {nodes[0].id} on rank {dst} from rank {src} (tag {tag}, iteration "
                f"{iteration}) has no matching send on rank {src}"
            )
        return out[:limit]


def _group_label(group: str) -> str:
    return "<world>" if group == WORLD else repr(group)
