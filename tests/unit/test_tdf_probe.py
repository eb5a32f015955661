"""Auto TDF's verification on the scenario's own workload (emulator.timescale.probe), with a fake
prober standing for the real 10 s replays: a machine whose worst tick is late by a fixed wall
time, so a factor holds when that lateness divided by it fits DCQCN's 4 us reaction timer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emulator.run.options import RunOptions
from emulator.scenario import load_scenario
from emulator.timescale.curve import CACHE_ENV
from emulator.timescale.probe import load_verified, scenario_key, verify
from emulator.timescale.tdf import TdfChoice

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def machine(late_p99_s: float, calls: list[float]) -> Any:
    def prober(tdf: float) -> dict[str, Any]:
        calls.append(tdf)
        worker = {"ticks": 1000, "p99_s": late_p99_s, "max_s": late_p99_s}
        paced = {"sent_bytes": 1e9, "lost_bytes": 0.0}
        return {
            "worker_tick_lateness": [worker, worker],
            "worker_busy_ratio": [0.3, 0.3],
            "worker_pacing": [paced, paced],
        }

    return prober


def _verify(scenario: Any, options: RunOptions, first: TdfChoice, prober: Any) -> TdfChoice:
    """verify as the engine-backed backends call it: this machine's data path, and over a
    cluster the placement in the cache key (emulator/backends/cluster/backend.py)."""
    from emulator.engine.native_path import expected_path
    from emulator.timescale.probe import placement_key

    suffix = f"|cluster {placement_key(scenario)}" if options.backend == "cluster" else ""
    return verify(
        scenario,
        first,
        prober,
        say=options.say,
        data_path=expected_path(scenario.engine.native),
        recalibrate=options.recalibrate,
        key_suffix=suffix,
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return tmp_path


def test_a_first_factor_that_holds_is_kept_and_cached(cache: Path) -> None:
    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    calls: list[float] = []
    first = TdfChoice(1600.0, "auto", 6.4e12, bound_by="load")
    options = RunOptions(progress=False, say=lambda _m: None)
    # 4 ms late: 2.5 us at TDF 1600, within 4 us
    got = _verify(scenario, options, first, machine(4e-3, calls))
    # it held twice in a row (HOLDS_NEEDED)
    assert got.tdf == 1600 and calls == [1600.0, 1600.0] and "held" in (got.bound_by or "")
    assert (cache / "verified_tdf.json").stat().st_mode & 0o077 == 0
    again: list[float] = []
    cached = _verify(scenario, options, first, machine(1.0, again))
    assert cached.tdf == 1600 and again == [] and "(cached)" in (cached.bound_by or "")


def test_late_ticks_raise_the_factor_then_bisection_finds_the_lowest(cache: Path) -> None:
    del cache
    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    calls: list[float] = []
    first = TdfChoice(1600.0, "auto", 6.4e12, bound_by="load")
    said: list[str] = []
    options = RunOptions(progress=False, say=said.append)
    # 14 ms late: needs TDF >= 3500. 1600 fails, grows x4 (need 2.2 x 1.2, capped
    # between 1.3 and 4) to 4200, which holds twice; bisection tries 2600 (late) then 3400 (late)
    got = _verify(scenario, options, first, machine(14e-3, calls))
    assert calls[:3] == [1600, 4200, 4200]
    assert all(t < 3500 for t in calls[3:]) and len(calls) <= 5
    assert got.tdf == 4200 and got.tdf * 4e-6 >= 14e-3
    assert any("TDF 1600: engine worker 0" in m for m in said)
    assert "probes of the workload" in (got.bound_by or "")
    assert load_verified(next(iter(_keys(scenario))))["tdf"] == 4200  # type: ignore[index]


def test_a_factor_holds_only_when_its_replays_hold_in_a_row(cache: Path) -> None:
    """The second replay at 1600 fails: 1600 does not hold, and the factor grows from what that
    replay said; a lucky first pass near the edge is not enough."""
    del cache
    from emulator.timescale.probe import HOLDS_NEEDED

    assert HOLDS_NEEDED == 2
    calls: list[float] = []
    said: list[str] = []
    on_time = {"ticks": 1000, "p99_s": 1e-3, "max_s": 1e-3}

    def prober(tdf: float) -> dict[str, Any]:
        calls.append(tdf)
        unlucky = tdf < 2000 and calls.count(tdf) == 2
        paced = {"sent_bytes": 1e9, "lost_bytes": (0.04 if unlucky else 0.01) * 1e9}
        return {
            "worker_tick_lateness": [on_time],
            "worker_busy_ratio": [0.3],
            "worker_pacing": [paced],
        }

    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    first = TdfChoice(1600.0, "auto", 6.4e12, bound_by="load")
    got = _verify(scenario, RunOptions(progress=False, say=said.append), first, prober)
    assert calls[:2] == [1600.0, 1600.0] and got.tdf >= 2000
    assert any("(10 s, 2 of 2)" in m for m in said)
    assert any(m.startswith("TDF 1600: engine worker 0") and "4.0%" in m for m in said)


def test_a_machine_that_never_keeps_up_runs_unverified_and_says_so(cache: Path) -> None:
    del cache
    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    calls: list[float] = []
    said: list[str] = []
    first = TdfChoice(100.0, "auto", 6.4e12, bound_by="load")
    got = _verify(
        scenario, RunOptions(progress=False, say=said.append), first, machine(10.0, calls)
    )
    assert len(calls) == 4 and got.bound_by == "unverified: probes kept failing"
    assert any(m.startswith("warning: no probe") for m in said)


def test_the_key_follows_what_the_probe_depends_on() -> None:
    a = load_scenario(SCENARIOS / "moe_mix.yaml")
    b = load_scenario(SCENARIOS / "allreduce_only.yaml")
    assert scenario_key(a) == scenario_key(load_scenario(SCENARIOS / "moe_mix.yaml"))
    assert scenario_key(a) != scenario_key(b)


def _keys(scenario: Any) -> list[str]:
    from emulator.engine.native_path import expected_path
    from emulator.timescale.curve import machine_key

    path = expected_path(scenario.engine.native)
    mtu = scenario.transport.path_mtu_bytes
    return [f"{machine_key(mtu, None, path)}|{scenario_key(scenario)}"]


def test_a_probe_passes_only_within_half_the_runs_pacing_deficit_limit(cache: Path) -> None:
    """A 3% deficit is within the run's verdict (5%) but not a probe's (2.5%): the factor grows
    until the probe has the margin."""
    from emulator.timescale.probe import PROBE_DEFICIT_LIMIT
    from emulator.timescale.verdict import PACING_DEFICIT_LIMIT

    del cache
    assert PROBE_DEFICIT_LIMIT == PACING_DEFICIT_LIMIT / 2
    calls: list[float] = []

    def prober(tdf: float) -> dict[str, Any]:
        calls.append(tdf)
        on_time = {"ticks": 1000, "p99_s": 1e-3, "max_s": 1e-3}
        behind = {"sent_bytes": 1e9, "lost_bytes": (0.03 if tdf < 2000 else 0.01) * 1e9}
        return {
            "worker_tick_lateness": [on_time],
            "worker_busy_ratio": [0.3],
            "worker_pacing": [behind],
        }

    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    said: list[str] = []
    first = TdfChoice(1600.0, "auto", 6.4e12, bound_by="load")
    got = _verify(scenario, RunOptions(progress=False, say=said.append), first, prober)
    assert calls[0] == 1600.0 and got.tdf >= 2000
    assert any("3.0% more bytes" in s for s in said)


def test_a_large_pacing_deficit_grows_the_factor_by_what_it_says() -> None:
    """Failing by 8% against a 2.5% limit grows the factor 3.2x (x the margin), not by the
    minimum step: four minimum steps from 3200 stopped at 7200, unverified, on moe_mix here."""
    from emulator.timescale.probe import GROWTH_MARGIN, GROWTH_MAX, GROWTH_MIN, lateness_growth

    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    on_time = {"ticks": 1000, "p99_s": 1e-3, "max_s": 1e-3}

    def meta(share: float) -> dict[str, Any]:
        return {
            "worker_tick_lateness": [on_time],
            "worker_pacing": [{"sent_bytes": 1e9, "lost_bytes": share * 1e9}],
        }

    assert lateness_growth(meta(0.08), 3200.0, scenario) == pytest.approx(
        min(0.08 / 0.025 * GROWTH_MARGIN, GROWTH_MAX)
    )
    assert lateness_growth(meta(0.026), 3200.0, scenario) == GROWTH_MIN
    assert lateness_growth(meta(0.5), 3200.0, scenario) == GROWTH_MAX


def test_a_cluster_runs_verified_factor_is_its_own(cache: Path) -> None:
    """The factor a cluster's probes verified is cached apart from this machine's for the same
    scenario, and apart from another placement's: the servers set it, not the driver."""
    import dataclasses

    from emulator.scenario.cluster import ClusterSpec, ServerSpec

    del cache
    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")

    def placed(*leaves: tuple[int, ...]) -> Any:
        servers = tuple(ServerSpec(name=n, leaves=ls) for n, ls in zip("ab", leaves, strict=False))
        cluster = ClusterSpec(servers=servers)
        return dataclasses.replace(scenario, run=dataclasses.replace(scenario.run, cluster=cluster))

    split, whole = placed((0,), (1,)), placed((0, 1))
    first = TdfChoice(1600.0, "auto per server", 6.4e12, bound_by="load", per_server={})
    one = RunOptions(progress=False, say=lambda _m: None)
    over = RunOptions(progress=False, say=lambda _m: None, backend="cluster")
    calls: list[float] = []
    assert _verify(scenario, one, first, machine(4e-3, calls)).tdf == 1600
    # the same scenario over the cluster probes again, and keeps the per-server curves
    got = _verify(split, over, first, machine(20e-3, calls))
    assert got.tdf > 1600 and got.per_server == {} and got.how == "auto per server"
    n = len(calls)
    assert _verify(split, over, first, machine(1.0, calls)).tdf == got.tdf
    assert len(calls) == n  # cached for this placement
    _verify(whole, over, first, machine(4e-3, calls))
    assert len(calls) == n + 2  # another placement probes again


def test_the_verified_factor_is_kept_per_data_path(cache: Path) -> None:
    """engine.native off (the Python path) is another machine for the probes: its factor is
    verified and cached on its own, not taken from the native path's."""
    import dataclasses

    del cache
    scenario = load_scenario(SCENARIOS / "moe_mix.yaml")
    python = dataclasses.replace(
        scenario, engine=dataclasses.replace(scenario.engine, native="off")
    )
    options = RunOptions(progress=False, say=lambda _m: None)
    first = TdfChoice(1600.0, "auto", 6.4e12, bound_by="load")
    calls: list[float] = []
    _verify(scenario, options, first, machine(4e-3, calls))
    n = len(calls)
    _verify(python, options, first, machine(4e-3, calls))
    assert len(calls) == 2 * n  # probed again: not the other path's cached factor
