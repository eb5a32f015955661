"""Per collective type: instances, flows, bytes and ideal times/bandwidths (what `emulate plan` prints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from emulator.schedule.busbw import algbw_bytes_per_s, busbw_bytes_per_s
from emulator.schedule.ideal import IdealResult
from emulator.schedule.job import InstanceResult


@dataclass(frozen=True)
class CollectiveSummary:
    """Instances of one collective type, group size, size and algorithm.

    ideal_time_s is the mean over instances of (last byte - moment all members had issued it);
    algbw and busbw follow nccl-tests from that mean time and the per-rank size S.
    """

    collective: str
    group_size: int
    size_bytes: int
    algorithm: str
    instances: int
    flows: int
    wire_bytes: int
    ideal_time_s: float
    ideal_algbw_bytes_per_s: float | None
    ideal_busbw_bytes_per_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.collective,
            "group_size": self.group_size,
            "bytes": self.size_bytes,
            "instances": self.instances,
            "flows": self.flows,
            "ideal_time_s": self.ideal_time_s,
            "ideal_algbw_bytes_per_s": self.ideal_algbw_bytes_per_s,
            "ideal_busbw_bytes_per_s": self.ideal_busbw_bytes_per_s,
            "algorithm": self.algorithm,
            "wire_bytes": self.wire_bytes,
        }


def summarize(results: Iterable[InstanceResult]) -> list[CollectiveSummary]:
    groups: dict[tuple[str, int, int, str], list[InstanceResult]] = {}
    for result in results:
        key = (result.collective, result.group_size, result.size_bytes, result.algorithm)
        groups.setdefault(key, []).append(result)
    out = []
    for (collective, n, size, algorithm), items in sorted(groups.items()):
        mean_s = sum(r.time_s for r in items) / len(items)
        out.append(
            CollectiveSummary(
                collective=collective,
                group_size=n,
                size_bytes=size,
                algorithm=algorithm,
                instances=len(items),
                flows=sum(r.flows for r in items),
                wire_bytes=sum(r.wire_bytes for r in items),
                ideal_time_s=mean_s,
                ideal_algbw_bytes_per_s=algbw_bytes_per_s(size, mean_s),
                ideal_busbw_bytes_per_s=busbw_bytes_per_s(collective, n, size, mean_s),
            )
        )
    return out


def plan_document(result: IdealResult) -> dict[str, Any]:
    """The `emulate plan --json` document."""
    return {
        "collectives": [s.to_json() for s in summarize(result.instances)],
        "flows_total": result.flows_total,
        "bytes_total": result.bytes_total,
        "ideal_job_time_s": result.job_time_s,
        "nodes_completed": result.nodes_completed,
    }
