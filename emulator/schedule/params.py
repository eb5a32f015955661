"""Scenario sections `collectives:` and `compute:` (how collectives become flows, how nodes take time).

Composed into the Scenario by emulator.scenario.model; every field is one YAML key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from emulator.config import param
from emulator.schedule.algorithms import check_algorithm_names

# Default algorithm per collective type (CollectiveCommType names of Chakra's et_def.proto).
# Ring for the reductions and broadcast as NCCL's ring algorithm; direct for the rooted
# gathers/scatters as NCCL implements them with point-to-point sends to/from the root.
DEFAULT_ALGORITHMS: dict[str, str] = {
    "ALL_REDUCE": "ring",
    "ALL_GATHER": "ring",
    "REDUCE_SCATTER": "ring",
    "ALL_TO_ALL": "parallel",
    "BROADCAST": "ring",
    "REDUCE": "ring",
    "GATHER": "direct",
    "SCATTER": "direct",
    "BARRIER": "dissemination",
}


def _default_algorithms() -> dict[str, str]:
    return dict(DEFAULT_ALGORITHMS)


@dataclass(frozen=True)
class CollectivesParams:
    """How a collective instance is decomposed into flows."""

    algorithms: dict[str, str] = param(
        default_factory=_default_algorithms,
        doc="algorithm per collective type, e.g. {ALL_REDUCE: halving_doubling}; types not "
        "named keep their default (ring for ALL_REDUCE/ALL_GATHER/REDUCE_SCATTER/BROADCAST/"
        "REDUCE, parallel for ALL_TO_ALL, direct for GATHER/SCATTER, dissemination for BARRIER)",
    )
    qps_per_peer: int = param(
        1,
        doc="queue pairs per (rank, peer); each transfer is split evenly over them, each QP "
        "has its own UDP source port",
        source="NCCL_IB_QPS_PER_CONNECTION default 1 (NCCL environment variables docs)",
        min=1,
        max=64,
    )
    udp_sport_min: int = param(
        49152,
        doc="lowest UDP source port given to a queue pair",
        source="Linux include/rdma/ib_verbs.h IB_ROCE_UDP_ENCAP_VALID_PORT_MIN 0xC000",
        min=1,
        max=65535,
    )
    udp_sport_max: int = param(
        65535,
        doc="highest UDP source port given to a queue pair",
        source="Linux include/rdma/ib_verbs.h IB_ROCE_UDP_ENCAP_VALID_PORT_MAX 0xFFFF",
        min=1,
        max=65535,
    )
    sport_policy: Literal["hash", "sequential", "balanced"] = param(
        "hash",
        doc="how a queue pair gets its source port: hash of (src, dst, qp) into the range (as "
        "Linux derives it from the flow label), sequential per source rank, or balanced: of "
        "256 hashed draws, the one whose ECMP path through the scenario's fabric is least "
        "loaded by the queue pairs placed before it (host-side traffic engineering)",
        source="Linux rdma_get_udp_sport() in include/rdma/ib_verbs.h; balanced: Gangidi et al., "
        "SIGCOMM 2024, section 5 (Meta: ECMP collisions, traffic engineering)",
    )
    chunk_bytes: int = param(
        4 * 1024 * 1024,
        doc="split each step's transfer into pipelined chunks of at most this size; chunk c of "
        "a step waits only for chunk c of the step it forwards (0: no chunking)",
        unit="bytes",
        source="NCCL_BUFFSIZE default 4 MiB (NCCL environment variables docs)",
        min=0,
    )
    alltoall_max_peers_in_flight: int = param(
        4,
        doc="the `paced` ALL_TO_ALL sends to at most this many peers at once per rank",
        min=1,
    )
    barrier_message_bytes: int = param(
        8, doc="payload of each BARRIER message", unit="bytes", min=1, max=4096
    )

    def __post_init__(self) -> None:
        if self.udp_sport_min > self.udp_sport_max:
            raise ValueError("udp_sport_min: must not exceed udp_sport_max")
        problem = check_algorithm_names(self.algorithms)
        if problem is not None:
            raise ValueError(f"algorithms: {problem}")

    def algorithm_for(self, collective: str) -> str:
        return self.algorithms.get(collective, DEFAULT_ALGORITHMS.get(collective, "direct"))


@dataclass(frozen=True)
class ComputeParams:
    """How compute, memory and CPU nodes of a trace turn into delays, and how ready nodes are picked."""

    include_cpu_ops: bool = param(
        True,
        doc="replay nodes with is_cpu_op=true as delays on a per-rank CPU stream (false: they "
        "take no time, their dependencies still hold)",
    )
    serialize_compute: bool = param(
        True,
        doc="one compute node at a time per rank and stream (GPU, CPU); communication overlaps",
        source="ASTRA-sim HardwareResource: one in-flight GPU and one CPU compute op per NPU",
    )
    flops_per_s: float = param(
        312e12,
        doc="roofline peak for COMP nodes without duration_micros but with num_ops",
        unit="FLOP/s",
        source="NVIDIA A100 datasheet: 312 TFLOPS BF16 dense tensor core",
        min=1.0,
    )
    mem_bytes_per_s: float = param(
        2.039e12,
        doc="roofline memory bandwidth for COMP nodes without duration_micros but with tensor_size",
        unit="bytes/s",
        source="NVIDIA A100 80GB SXM datasheet: 2039 GB/s HBM2e",
        min=1.0,
    )
    memory_node_bytes_per_s: float = param(
        25e9,
        doc="bandwidth that turns MEM_LOAD/MEM_STORE tensor_size into a delay",
        unit="bytes/s",
        source="about PCIe 4.0 x16 effective throughput",
        min=1.0,
    )
    ready_policy: Literal["trace_order", "start_time"] = param(
        "trace_order",
        doc="which ready node a rank issues first: record order in the file, or "
        "start_time_micros (ties by record order)",
    )
    window_nodes: int = param(
        4096,
        doc="records each rank's feeder reads ahead of the oldest unfinished node (it reads "
        "further only when nothing in the window can run)",
        source="mlcommons/chakra et_feeder window_size_ default 4096",
        min=1,
    )
    stragglers: dict[str, float] = param(
        default_factory=dict,
        doc="impairment: rank -> factor its compute delays are multiplied by (a straggler: "
        "{3: 2.0} makes rank 3 compute twice as long); the ideal-time model includes it, so "
        "busbw ratios still measure the network",
    )

    def __post_init__(self) -> None:
        for rank, factor in self.stragglers.items():
            if not rank.isdigit():
                raise ValueError(f"stragglers: {rank!r} is not a rank number")
            if not (isinstance(factor, int | float) and 0 < factor < float("inf")):
                raise ValueError(f"stragglers: rank {rank}: factor {factor!r} must be positive")

    def compute_factor(self, rank: int) -> float:
        """How much slower than the trace says this rank computes (1.0: as the trace says)."""
        return float(self.stragglers.get(str(rank), 1.0))


__all__ = ["DEFAULT_ALGORITHMS", "CollectivesParams", "ComputeParams"]
