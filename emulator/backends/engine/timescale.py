"""The time dilation factor of an engine-backed emulated fabric (backends/netns, backends/cluster).

The scenario's factor (or the command line's) as given; with `run.time_dilation: auto`, the
lowest factor this machine's load curve says holds for the scenario's peak load (the curve
measured here with the engine, or, over a cluster, on each server: `first`), verified by short
replays of the scenario itself (emulator.timescale.probe, through the run's prober).
"""

from __future__ import annotations

from collections.abc import Callable

from emulator.backends.base import TimescaleRequest
from emulator.backends.engine.load_curve import calibrate, calibration_shape
from emulator.engine.native_path import expected_path
from emulator.timescale.probe import verify
from emulator.timescale.tdf import TdfChoice, auto_tdf


def dilated_timescale(
    request: TimescaleRequest,
    first: Callable[[], TdfChoice] | None = None,
    key_suffix: str = "",
) -> TdfChoice:
    """`first`: auto's first factor where the curve is not this machine's (a cluster's servers);
    `key_suffix`: what else the verified factor depends on (the cluster's placement)."""
    scenario, options, planned = request.scenario, request.options, request.planned
    peak_bps = planned.world_size * scenario.fabric.rank_rate_bps
    if options.tdf is not None:
        return TdfChoice(options.tdf, "command line", peak_bps)
    setting = scenario.run.time_dilation
    if setting != "auto":
        return TdfChoice(float(setting), "scenario", peak_bps)
    if first is not None:
        choice = first()
    else:
        calibration = calibrate(
            scenario.transport.path_mtu_bytes,
            calibration_shape(scenario, planned.world_size),
            native=scenario.engine.native,
            refresh=options.recalibrate,
            say=options.say,
        )
        tdf, why = auto_tdf(
            peak_bps,
            calibration,
            scenario.transport.dcqcn,
            scenario.metrics.fidelity.cpu_busy_ratio,
        )
        choice = TdfChoice(tdf, "auto", peak_bps, calibration, why)
    return verify(
        scenario,
        choice,
        request.prober,
        say=options.say,
        data_path=expected_path(scenario.engine.native),
        recalibrate=options.recalibrate,
        key_suffix=key_suffix,
    )
