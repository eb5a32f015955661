"""moe_mix: an MoE training step per iteration on every rank.

attention compute -> All-to-All dispatch (expert-parallel group) -> expert compute -> All-to-All
combine -> post compute -> All-Reduce of the gradients (data-parallel group). With overlap the
next step starts right after the post compute, so step i's All-Reduce runs under step i+1's
compute, dispatch and combine; step i+1's post compute (which needs the reduced gradients) waits
for it, so at most one gradient All-Reduce is in flight, as in a real MoE step (and as in the
Chakra paper's mixed study, section 5.3). Without overlap step i+1 starts after the All-Reduce.

include_alltoall / include_allreduce: false drops that collective and keeps everything else (the
computes, their order and the dependencies through the dropped nodes), so the baselines of the
interference study ("each collective alone") differ from the mix by exactly one collective type.
"""

from __future__ import annotations

from emulator.chakra import pb
from emulator.workloads.nodes import NodeWriter, metadata
from emulator.workloads.params import MoeMixParams

ALL_REDUCE, ALL_TO_ALL = 0, 6  # CollectiveCommType


def groups(params: MoeMixParams) -> tuple[dict[str, list[int]], list[str], list[str]]:
    """Comm groups, and per rank its expert-parallel and data-parallel group ids."""
    members = _expert_groups(params)
    ep, ep_count = params.expert_parallel_size, len(members)
    comm: dict[str, list[int]] = {}
    ep_of, dp_of = [""] * params.ranks, [""] * params.ranks
    for group in members:
        name = str(len(comm) + 1)
        comm[name] = sorted(group)
        for r in group:
            ep_of[r] = name
    # Data-parallel group p: member p of every expert-parallel group, except with split, where
    # group g contributes its member p + g * E/G, so that each pair has ranks in different blocks.
    shift = ep // ep_count if params.expert_placement == "split" else 0
    for position in range(ep):
        name = str(len(comm) + 1)
        comm[name] = sorted(members[g][(position + g * shift) % ep] for g in range(ep_count))
        for r in comm[name]:
            dp_of[r] = name
    return comm, ep_of, dp_of


def _expert_groups(params: MoeMixParams) -> list[list[int]]:
    """Each expert-parallel group's ranks, in member order (see MoeMixParams.expert_placement)."""
    ep = params.expert_parallel_size
    ep_count = params.ranks // ep
    if params.expert_placement == "strided":
        return [list(range(g, params.ranks, ep_count)) for g in range(ep_count)]
    if params.expert_placement == "split":
        share = ep // ep_count
        return [
            [block * ep + g * share + i for block in range(ep_count) for i in range(share)]
            for g in range(ep_count)
        ]
    return [list(range(g * ep, (g + 1) * ep)) for g in range(ep_count)]


def build(
    params: MoeMixParams,
) -> tuple[list[tuple[pb.GlobalMetadata, list[pb.Node]]], dict[str, list[int]]]:
    comm, ep_of, dp_of = groups(params)
    ranks = []
    for rank in range(params.ranks):
        w = NodeWriter()
        previous_post = previous_ar = 0
        for i in range(params.iterations):
            start_deps = [previous_post] if params.overlap else [previous_post, previous_ar]
            attention = w.compute(f"attention_{i}", params.attention_compute_us, start_deps)
            before_expert = attention
            if params.include_alltoall:
                before_expert = w.collective(
                    f"alltoall_dispatch_{i}",
                    ALL_TO_ALL,
                    params.dispatch_bytes,
                    ep_of[rank],
                    [attention],
                )
            expert = w.compute(f"expert_{i}", params.expert_compute_us, [before_expert])
            before_post = expert
            if params.include_alltoall:
                before_post = w.collective(
                    f"alltoall_combine_{i}",
                    ALL_TO_ALL,
                    params.combine_size_bytes,
                    ep_of[rank],
                    [expert],
                )
            # A dropped All-Reduce leaves previous_ar at 0, which NodeWriter skips as a dep.
            post_deps = [before_post, previous_ar] if params.overlap else [before_post]
            previous_post = w.compute(f"post_{i}", params.post_compute_us, post_deps)
            if params.include_allreduce:
                previous_ar = w.collective(
                    f"allreduce_grad_{i}",
                    ALL_REDUCE,
                    params.allreduce_bytes,
                    dp_of[rank],
                    [previous_post],
                )
        ranks.append((metadata("moe_mix"), w.nodes))
    return ranks, comm
