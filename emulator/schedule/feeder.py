"""Per-rank ready queue over a trace's dependency graph (Kahn's algorithm on a stream).

A node is ready when its data dependencies and valid ctrl dependencies have completed. The feeder
reads records lazily and keeps only the window of read-but-unfinished nodes plus one bit per
finished id: it reads ahead up to `window_nodes` unfinished nodes (as mlcommons/chakra's
et_feeder does with its window), further only while nothing can run. Nodes may refer forward;
a dependency on an id never seen is resolved at end of file: a dangling or self ctrl dependency
is dropped with a warning (PyTorch traces have both), a dangling data dependency is an error.
A dependency cycle is found and named when the rank stalls.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from emulator.errors import PlanError
from emulator.schedule.idset import IdSet
from emulator.schedule.nodes import NodeInfo

ReadyKey = Callable[[NodeInfo], tuple[int, ...]]


def _trace_order(node: NodeInfo) -> tuple[int, ...]:
    return (node.index,)


def _start_time(node: NodeInfo) -> tuple[int, ...]:
    return (node.start_time_us, node.index)


# Deterministic ready policies: the ready node with the smallest key is issued first.
READY_POLICIES: dict[str, ReadyKey] = {"trace_order": _trace_order, "start_time": _start_time}


class _Entry:
    __slots__ = ("children", "ctrl_from", "node", "waiting")

    def __init__(self, node: NodeInfo) -> None:
        self.node = node
        self.waiting = 0
        self.children: list[_Entry] = []
        self.ctrl_from: set[int] | None = None  # parents linked by a ctrl dependency only


class RankFeeder:
    """Ready nodes of one rank, iteration after iteration (iteration i+1 starts when i is done).

    open_pass(iteration) gives the rank's nodes in record order for one pass over the file;
    on_read(iteration, node) is called for every node as it is read (matching needs file order).
    """

    def __init__(
        self,
        rank: int,
        open_pass: Callable[[int], Iterator[NodeInfo]],
        *,
        iterations: int = 1,
        window_nodes: int = 4096,
        ready_policy: str = "trace_order",
        where: str = "",
        on_read: Callable[[int, NodeInfo], None] | None = None,
    ) -> None:
        self.rank = rank
        self.where = where or f"rank {rank}"
        self.iterations = iterations
        self.window_nodes = window_nodes
        self.key = READY_POLICIES[ready_policy]
        self.on_read = on_read
        self.warnings: list[str] = []
        self.iteration = 0
        self.in_flight = 0
        self.read_total = 0
        self.peak_window = 0
        self._open_pass = open_pass
        self._start_pass()

    # -- state of one pass -------------------------------------------------------------------
    def _start_pass(self) -> None:
        self._records: Iterator[NodeInfo] | None = self._open_pass(self.iteration)
        self._pending: dict[int, _Entry] = {}
        self._done = IdSet()
        self._unseen: dict[int, list[tuple[_Entry, bool]]] = {}
        self._ready: list[tuple[tuple[int, ...], int, _Entry]] = []
        self._self_ctrl = 0
        self._broken_ctrl: list[tuple[int, int]] = []

    @property
    def finished(self) -> bool:
        return self._records is None and not self._pending and self.iteration >= self.iterations

    @property
    def window(self) -> int:
        return len(self._pending)

    def take_ready(self) -> list[NodeInfo]:
        """Every node that can be issued now, in policy order; the caller must complete() each."""
        self._fill(force=False)
        while not self._ready and self.in_flight == 0 and self._pending:
            self._break_cycle()  # nothing runs and nothing will: the rest waits on itself
        out: list[NodeInfo] = []
        while self._ready:
            out.append(heapq.heappop(self._ready)[2].node)
        self.in_flight += len(out)
        return out

    def complete(self, node_id: int) -> None:
        entry = self._pending.pop(node_id)
        self._done.add(node_id)
        self.in_flight -= 1
        for child in entry.children:
            child.waiting -= 1
            if child.waiting == 0:
                self._push(child)
        self._maybe_next_pass()

    def extend(self) -> bool:
        """Read one more window past the limit (the job is stalled); False at end of file."""
        if self._records is None:
            return False
        before = self.read_total
        target = len(self._pending) + self.window_nodes
        while self._records is not None and len(self._pending) < target:
            self._read_one()
        return self.read_total > before

    # -- reading -----------------------------------------------------------------------------
    def _fill(self, force: bool) -> None:
        while self._records is not None and (
            force
            or len(self._pending) < self.window_nodes
            or (not self._ready and self.in_flight == 0)
        ):
            self._read_one()

    def _read_one(self) -> None:
        assert self._records is not None
        node = next(self._records, None)
        if node is None:
            self._records = None
            self._end_of_file()
            return
        self.read_total += 1
        self._add(node)
        if len(self._pending) > self.peak_window:
            self.peak_window = len(self._pending)

    def _add(self, node: NodeInfo) -> None:
        node_id = node.id
        if node_id in self._pending or node_id in self._done:
            raise PlanError(f"{self.where}: node id {node_id} appears twice in the file")
        entry = _Entry(node)
        waiting = 0
        for dep in node.data_deps:
            waiting += self._link(entry, dep, False)
        for dep in node.ctrl_deps:
            if dep == node_id:
                self._self_ctrl += 1
                continue
            if dep in node.data_deps:
                continue  # already waited for as data
            if entry.ctrl_from is None:
                entry.ctrl_from = set()
            entry.ctrl_from.add(dep)
            waiting += self._link(entry, dep, True)
        entry.waiting = waiting
        self._pending[node_id] = entry
        waiters = self._unseen.pop(node_id, None)
        if waiters:
            entry.children.extend(waiter for waiter, _ in waiters)
        if self.on_read is not None:
            self.on_read(self.iteration, node)
        if waiting == 0:
            self._push(entry)

    def _link(self, entry: _Entry, dep: int, ctrl: bool) -> int:
        if dep in self._done:
            return 0
        parent = self._pending.get(dep)
        if parent is not None:
            parent.children.append(entry)
        else:
            self._unseen.setdefault(dep, []).append((entry, ctrl))
        return 1

    def _push(self, entry: _Entry) -> None:
        heapq.heappush(self._ready, (self.key(entry.node), entry.node.index, entry))

    def _end_of_file(self) -> None:
        dangling_ctrl = 0
        for dep, waiters in self._unseen.items():
            for entry, ctrl in waiters:
                if not ctrl:
                    raise PlanError(
                        f"{self.where}: node {entry.node.id} ({entry.node.name!r}) has a data "
                        f"dependency on node {dep}, which is not in the file"
                    )
                dangling_ctrl += 1
                entry.waiting -= 1
                if entry.waiting == 0:
                    self._push(entry)
        self._unseen.clear()
        if self.iteration == 0:
            if self._self_ctrl:
                self.warnings.append(
                    f"{self.where}: ignored {self._self_ctrl} ctrl dependenc(ies) of a node on itself"
                )
            if dangling_ctrl:
                self.warnings.append(
                    f"{self.where}: ignored {dangling_ctrl} ctrl dependenc(ies) on node ids not "
                    "in the file"
                )
        self._maybe_next_pass()

    def _maybe_next_pass(self) -> None:
        if self._records is None and not self._pending and self.iteration < self.iterations:
            self._cycle_warning()
            self.iteration += 1
            if self.iteration < self.iterations:
                self._start_pass()

    def _break_cycle(self) -> None:
        """Drop the ctrl dependencies inside every dependency cycle (data dependencies win:
        PyTorch traces record the enclosing op as ctrl dep, which may itself wait on its kernel);
        a cycle of data dependencies alone is an error naming its nodes. One pass over the
        unfinished nodes handles every cycle in them."""
        dropped = 0
        for component in self._cycles():
            members = set(component)
            ctrl_edges = [
                (child_id, parent_id)
                for child_id in component
                for parent_id in (self._pending[child_id].ctrl_from or ())
                if parent_id in members
            ]
            if not ctrl_edges:
                names = ", ".join(str(i) for i in sorted(component)[:12])
                raise PlanError(
                    f"{self.where}: dependency cycle of data dependencies among nodes {names}"
                )
            for child_id, parent_id in ctrl_edges:
                child = self._pending[child_id]
                assert child.ctrl_from is not None
                child.ctrl_from.discard(parent_id)
                self._pending[parent_id].children.remove(child)
                self._broken_ctrl.append((child_id, parent_id))
                child.waiting -= 1
                if child.waiting == 0:
                    self._push(child)
                dropped += 1
        if not dropped:
            ids = [entry.node.id for entry in list(self._pending.values())[:5]]
            raise PlanError(f"{self.where}: nodes {ids} wait for nodes that never complete")

    def _cycles(self) -> list[list[int]]:
        """Strongly connected components with a cycle (Tarjan, iterative) among unfinished nodes."""
        edges: dict[int, list[int]] = {}
        for entry in self._pending.values():
            for child in entry.children:
                edges.setdefault(entry.node.id, []).append(child.node.id)
        index: dict[int, int] = {}
        low: dict[int, int] = {}
        on_stack: set[int] = set()
        stack: list[int] = []
        out: list[list[int]] = []
        for root in self._pending:
            if root in index:
                continue
            work: list[tuple[int, Iterator[int]]] = [(root, iter(edges.get(root, ())))]
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            while work:
                node_id, it = work[-1]
                nxt = next(it, None)
                if nxt is not None:
                    if nxt not in index:
                        index[nxt] = low[nxt] = len(index)
                        stack.append(nxt)
                        on_stack.add(nxt)
                        work.append((nxt, iter(edges.get(nxt, ()))))
                    elif nxt in on_stack:
                        low[node_id] = min(low[node_id], index[nxt])
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node_id])
                if low[node_id] == index[node_id]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node_id:
                            break
                    looped = len(component) > 1 or node_id in edges.get(node_id, ())
                    if looped:
                        out.append(component)
        return out

    def _cycle_warning(self) -> None:
        if self._broken_ctrl and self.iteration == 0:
            child, parent = self._broken_ctrl[0]
            self.warnings.append(
                f"{self.where}: ignored {len(self._broken_ctrl)} ctrl dependenc(ies) that closed a "
                f"cycle with data dependencies (e.g. node {child} on node {parent})"
            )

    # -- diagnostics ---------------------------------------------------------------------------
    def find_cycle(self) -> list[int] | None:
        """The nodes of one dependency cycle among the unfinished nodes, if any."""
        cycles = self._cycles()
        return cycles[0] if cycles else None

    def unfinished(self, limit: int = 5) -> list[NodeInfo]:
        return [entry.node for entry in list(self._pending.values())[:limit]]
