"""The planner's progressive filling in C (emulator/native/fill.c) against its numpy fallback
(emulator.schedule.fluid.FluidNetwork._fill_numpy): the same rates, bit for bit, on random
networks through completions and class turnover, and the same congestion-free plan of a shipped
scenario. The fallback itself is held to the definition of max-min fairness in
test_schedule_fluid.py.

Without the extension these tests skip with the reason, except `test_extension_is_built`, which
fails wherever a C compiler is present (CI runs ./setup.sh, which builds it).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.native import HERE, built_path, load, stale
from emulator.schedule import fluid
from emulator.schedule.fluid import FluidNetwork

MODULE, WHY_NOT = load("fill")
needs_native = pytest.mark.skipif(MODULE is None, reason=f"native fill absent: {WHY_NOT}")
REPO = Path(__file__).resolve().parents[2]


def test_extension_is_built() -> None:
    if not (HERE / "fill.c").exists() or shutil.which("gcc") is None:
        pytest.skip("no native sources or no gcc here: the numpy path is the only one")
    assert not stale("fill"), f"{built_path('fill')} is missing or stale: {WHY_NOT}"
    assert MODULE is not None, WHY_NOT


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[float], list[tuple[int, ...]], list[tuple[int, int]]]:
    """Links (bit/s), flows' paths, and (path, bytes) of each flow in arrival order; several
    flows share a path (one class, weighted by its members) and links tie on purpose."""
    links = draw(st.integers(1, 9))
    capacities = [draw(st.sampled_from([8e9, 16e9, 40e9, 100e9, 400e9])) for _ in range(links)]
    paths = [
        tuple(sorted(draw(st.sets(st.integers(0, links - 1), min_size=1, max_size=links))))
        for _ in range(draw(st.integers(1, 8)))
    ]
    flows = [
        (
            draw(st.integers(0, len(paths) - 1)),
            draw(st.sampled_from([1, 4096, 65536, 10**6, 3 * 10**6 + 7])),
        )
        for _ in range(draw(st.integers(1, 40)))
    ]
    return capacities, paths, flows


def _run(
    case: tuple[list[float], list[tuple[int, ...]], list[tuple[int, int]]], native: bool
) -> list[object]:
    """Flows arrive in two waves; every completion and the rates after each are recorded."""
    capacities, paths, flows = case

    def path(src: int, dst: int, sport: int) -> list[tuple[str, float]]:
        return [(f"l{i}", capacities[i]) for i in paths[sport]]

    net = FluidNetwork(path, native=native)
    assert (net._native is not None) == native
    seen: list[object] = []
    half = len(flows) // 2
    for k, (p, size) in enumerate(flows[:half]):
        net.add(k, k, k + 1000, p, size)
    for _ in range(200):
        t = net.next_completion()
        seen.append((t, net._rate[: net._classes].tobytes()))
        if t == math.inf:
            if half < len(flows):
                for k, (p, size) in enumerate(flows[half:], start=half):
                    net.add(k, k, k + 1000, p, size)
                half = len(flows)
                continue
            break
        seen.append(net.advance(t))
    return seen


@needs_native
@settings(max_examples=300, deadline=None)
@given(workloads())
def test_the_rates_and_completions_are_the_fallbacks_bit_for_bit(
    case: tuple[list[float], list[tuple[int, ...]], list[tuple[int, int]]],
) -> None:
    assert _run(case, native=True) == _run(case, native=False)


@needs_native
def test_a_shipped_scenarios_plan_is_the_same_with_either(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`emulate plan --json` of alltoall_only.yaml (many flows a phase on shared links), every
    number of it, with the C levels and with numpy's."""
    from emulator.cli import main

    plans = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(fluid.NativeFill, "load", classmethod(lambda cls: None))
        assert main(["plan", str(REPO / "scenarios" / "alltoall_only.yaml"), "--json"]) == 0
        plans.append(json.loads(capsys.readouterr().out))
    assert plans[0]["collectives"] and plans[0] == plans[1]


def test_without_the_extension_the_numpy_levels_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unbuilt module leaves the network on numpy, with the rates of the definition."""
    monkeypatch.setattr(fluid.NativeFill, "load", classmethod(lambda cls: None))
    net = FluidNetwork(lambda s, d, p: [("a", 8e9)])
    assert net._native is None
    net.add(0, 0, 1, 0, 1_000_000)
    net.add(1, 1, 2, 0, 1_000_000)
    assert net.next_completion() == pytest.approx(0.002)
    np.testing.assert_allclose(net._rate[:1], [0.5e9])


@needs_native
def test_an_incidence_not_sorted_by_class_is_refused() -> None:
    """fill.c sums in the incidence's order by walking classes in order: unsorted, it refuses
    rather than give rates that differ from numpy's."""
    native = fluid.NativeFill.load()
    assert native is not None
    with pytest.raises(ValueError, match="not sorted by class"):
        native.fill(
            np.array([1, 0]),
            np.array([0, 0]),
            np.array([1.0, 1.0]),
            np.array([1e9]),
            np.zeros(2, dtype=np.uint8),
            np.zeros(2),
            tie=1e-12,
            min_share=1e-9,
        )
