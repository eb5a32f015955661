"""Fabric backends by scenario `kind`: one call brings a `fabric:` section up at a time dilation.

The run coordinator calls `bring_up_fabric(spec, time_dilation=...)` and gets a live fabric with
`close()` and `metadata()` (which names the ECN marker used); new fabric kinds register here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emulator.errors import ScenarioError
from fabrics.dut import LiveDut, bring_up_dut
from fabrics.netns import LiveFabric, Progress, bring_up
from fabrics.spec import ClosSpec, DutSpec, kind_of
from fabrics.topology import build_clos

Live = LiveFabric | LiveDut


def _clos(spec: Any, tdf: float, prefix: str, progress: Progress | None) -> Live:
    assert isinstance(spec, ClosSpec)
    try:
        topology = build_clos(spec)
    except ValueError as exc:
        raise ScenarioError(f"fabric: {exc}") from None
    return bring_up(
        topology,
        rate_scale=1 / tdf,
        delay_scale=tdf,
        marker=spec.marker,
        prefix=prefix,
        progress=progress,
        builder=spec.builder,
    )


def _dut(spec: Any, tdf: float, prefix: str, progress: Progress | None) -> Live:
    # A DUT runs at its real speed: time dilation cannot slow a physical switch down.
    assert isinstance(spec, DutSpec)
    if tdf != 1:
        raise ScenarioError(f"run.time_dilation: {tdf:g} cannot apply to a dut fabric; use 1")
    del progress
    return bring_up_dut(spec, prefix=prefix)


FABRICS: dict[str, Callable[[Any, float, str, Progress | None], Live]] = {
    "clos": _clos,
    "dut": _dut,
}


def bring_up_fabric(
    spec: object,
    *,
    time_dilation: float = 1.0,
    prefix: str = "emu-",
    progress: Progress | None = None,
) -> Live:
    """Bring the fabric of a scenario's `fabric:` section up; release it with `.close()`."""
    if time_dilation < 1:
        raise ScenarioError(f"run.time_dilation: {time_dilation:g} must be at least 1")
    return FABRICS[kind_of(spec)](spec, time_dilation, prefix, progress)
