"""Every real trace set in ../shared/traces plans for one iteration with default algorithms."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from emulator.errors import PlanError
from emulator.schedule.planner import plan_trace
from emulator.schedule.summary import summarize

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
# chakra_generator's lone send/recv nodes have no peer rank: they cannot be matched.
UNMATCHABLE = {"one_comm_send_node", "one_comm_recv_node"}


def trace_sets() -> list[str]:
    if not TRACES.is_dir():
        return []
    prefixes = {str(p.parent / re.sub(r"\.\d+\.et$", "", p.name)) for p in TRACES.rglob("*.et")}
    return sorted(prefixes)


SETS = trace_sets()


@pytest.mark.skipif(not SETS, reason=f"trace folder {TRACES} is absent")
@pytest.mark.parametrize("prefix", SETS, ids=lambda p: str(Path(p).relative_to(TRACES)))
def test_trace_set_plans(prefix: str) -> None:
    if Path(prefix).name in UNMATCHABLE:
        with pytest.raises(
            PlanError, match=r"has no comm_(dst|src).*cannot be matched.*lone send/recv"
        ):
            plan_trace(prefix)
        return
    outcome = plan_trace(prefix)
    result = outcome.result
    assert result.job_time_s >= 0.0
    assert result.bytes_total == sum(i.wire_bytes for i in result.instances)
    for instance in result.instances:
        if instance.group_size > 1 and instance.size_bytes > 0:
            assert instance.flows > 0 and instance.time_s > 0.0
    if "microbenchmarks" in prefix:
        # one collective alone on a non-blocking Clos of 100 Gb/s links: line-rate busbw
        (summary,) = summarize(result.instances)
        assert summary.ideal_busbw_bytes_per_s == pytest.approx(12.5e9)


def test_trace_walk_covers_the_known_sets() -> None:
    if not SETS:
        pytest.skip(f"trace folder {TRACES} is absent")
    assert len(SETS) >= 40
