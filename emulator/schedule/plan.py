"""Flow plan records: logical transfers of an algorithm, flows on the wire, collective instances.

Ranks are global ranks; a NodeRef is (rank, node id) within the instance's iteration. Bytes are
payload bytes (RoCEv2 headers excluded).
"""

from __future__ import annotations

from dataclasses import dataclass

NodeRef = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One logical send of an algorithm, between group positions (not yet ranks, chunks or QPs).

    `deps` are indices of earlier transfers of the same list whose data this one forwards or
    needs (it may start only once they have arrived).
    """

    step: int
    src: int
    dst: int
    bytes: int
    deps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Flow:
    """One message on one queue pair: what the transport sends as a unit and times as one FCT.

    It may start when every flow in `deps` has been completely received and every node in
    `node_deps` has been issued by its rank (the collective's rendezvous).
    """

    id: int
    instance: int
    iteration: int
    step: int
    src: int
    dst: int
    qp: int
    udp_sport: int
    bytes: int
    deps: tuple[int, ...] = ()
    node_deps: tuple[NodeRef, ...] = ()
    chunk: int = 0
    profile: int = 0  # how its QP sends (emulator.engine.plan.QpProfile); 0: the transport's


@dataclass(frozen=True, slots=True)
class CollectiveInstance:
    """One collective (or one matched send/recv pair) across its member ranks, and its flows.

    `collective` is a Chakra CollectiveCommType name (ALL_REDUCE, ...) or SEND_RECV; `size_bytes`
    is Chakra's comm_size (the per-rank buffer, as ASTRA-sim and the nccl-tests S read it);
    `nodes[i]` is the trace node of `members[i]`.
    """

    id: int
    iteration: int
    collective: str
    group: str
    members: tuple[int, ...]
    size_bytes: int
    algorithm: str
    nodes: tuple[NodeRef, ...]
    flows: tuple[Flow, ...]
    root: int | None = None
    job: str = ""  # the scenario's job it belongs to (several jobs on one fabric); "" for traffic

    @property
    def group_size(self) -> int:
        return len(self.members)

    @property
    def timed_from_rank(self) -> int | None:
        """The member whose issue starts the instance's time, or None for the last member's
        (the rendezvous). A send/recv is an eager send: its flow leaves when the send is
        issued, so it is timed from the sender (the recv may be issued after the last byte);
        the ideal model (emulator.schedule.job) and the measured records
        (collectors.records) both use this one definition."""
        return self.members[0] if self.collective == "SEND_RECV" else None

    @property
    def wire_bytes(self) -> int:
        return sum(flow.bytes for flow in self.flows)
