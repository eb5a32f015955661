"""`emulate run`, end to end: plan, choose the TDF, bring the fabric up, replay, measure, write
(the backend and the replay: emulator.run.execute).

Order matters for what a failure leaves behind: everything that can refuse bad input (scenario,
trace set, plan, results folder) runs before the fabric exists; the fabric, the exporter, the
sampler and the engine's workers are released in reverse order whatever happens. An interrupted
or failed replay still writes the results folder, marked partial, before the error propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from collectors.reference import DRAWS_DIR, draw_folder
from collectors.results import ResultsWriter, default_results_dir
from collectors.tables import read_tables
from emulator.backends import backend_for, backend_name
from emulator.backends.engine import fabric_ranks, target_rate_bps
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.run.calibrate import Shape
from emulator.run.execute import SimReference, run_planned
from emulator.run.link_events import resolve as resolve_link_events
from emulator.run.options import RunOptions, RunResult
from emulator.run.tdf import TdfChoice, auto_tdf
from emulator.run.workload import (
    PlannedWorkload,
    plan_workload,
    trace_prefix,
)
from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec, DutSpec


def calibration_shape(scenario: Scenario, world: int) -> Shape:
    """The scenario's fabric and QPs, for a calibration shaped like its run."""
    fabric = scenario.fabric
    qps = scenario.collectives.qps_per_peer
    if isinstance(fabric, ClosSpec) and fabric.pods == 1:
        return Shape(
            fabric.hosts_per_leaf,
            fabric.leaves,
            fabric.spines,
            fabric.parallel_links,
            qps,
            world,
        )
    # several pods: the same number of ranks on one pod's two tiers
    leaves = max(2, math.ceil(world / 16))
    return Shape(max(1, math.ceil(world / leaves)), leaves, 2, 1, qps, world)


def choose_tdf(
    scenario: Scenario, options: RunOptions, world: int, planned: PlannedWorkload | None = None
) -> TdfChoice:
    peak_bps = world * target_rate_bps(scenario.fabric)
    if isinstance(scenario.fabric, DutSpec):
        return TdfChoice(1.0, "dut", peak_bps)
    if options.tdf is not None:
        return TdfChoice(options.tdf, "command line", peak_bps)
    setting = scenario.run.time_dilation
    if setting != "auto":
        return TdfChoice(float(setting), "scenario", peak_bps)
    # the load curve where the backend runs (a cluster's servers), else this machine's
    first = None
    if planned is not None:
        first = backend_for(scenario, options.backend).load_curve_tdf(scenario, options, planned)
    if first is None:
        from emulator.run.calibrate import calibrate

        calibration = calibrate(
            scenario.transport.path_mtu_bytes,
            calibration_shape(scenario, world),
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
        first = TdfChoice(tdf, "auto", peak_bps, calibration, why)
    if planned is None or not isinstance(scenario.fabric, ClosSpec):
        return first
    from emulator.run.probe import verify

    return verify(scenario, options, planned, first)


def scenario_text(scenario: Scenario) -> str:
    """The scenario as run: its file, or the file with what the caller changed (--iterations,
    the study's seed) written in, so the copy in the results folder replays the same run."""
    if scenario.source is not None and scenario.source.is_file():
        from emulator.scenario import load_scenario

        text = scenario.source.read_text()
        written = load_scenario(scenario.source)
        changes = _changed_keys(scenario, written)
        jobs_changed = scenario.several_jobs and scenario.jobs != written.jobs
        if not changes and not jobs_changed and scenario.name == written.name:
            return text
        doc = yaml.safe_load(text)
        said = [f"{s}.{k}: {v}" for (s, k), v in changes.items()]
        for (section, key), value in changes.items():
            doc.setdefault(section, {})[key] = value
        if scenario.name != written.name:
            doc["name"] = scenario.name
            said.append(f"name: {scenario.name}")
        if jobs_changed:
            _write_jobs(doc, scenario, written)
            said.append(f"workloads: {', '.join(j.name for j in scenario.jobs)}")
        return (
            f"# {scenario.source.name} as run ({'; '.join(said)} set by the caller)\n"
            + yaml.safe_dump(doc, sort_keys=False)
        )
    return yaml.safe_dump(_plain(dataclasses.asdict(scenario)), sort_keys=False)


# What a caller may change from the scenario's file: the study's seeds, --reference sim's
# marking point and draws, the sensitivity study's link rates (a fabric without the key keeps
# None on both sides; workload.iterations is handled below: the workload may be absent).
CALLER_KEYS = (
    ("run", "seed"),
    ("fabric", "ecn_mark_point"),
    ("fabric", "host_link_gbps"),
    ("fabric", "fabric_link_gbps"),
    ("sim", "draw_seed"),
)


def _write_jobs(doc: dict[str, Any], scenario: Scenario, written: Scenario) -> None:
    """The caller's jobs into the file's document (the jobs study's "alone": some of the file's
    jobs, each pinned to its hosts; --iterations on several jobs): each job's own entry from
    the file, with its name, hosts, passes and start as run."""
    entries = doc.pop("workloads", None) or [doc.pop("workload", None) or {}]
    by_name = {job.name: dict(entry) for job, entry in zip(written.jobs, entries, strict=False)}
    doc["workloads"] = [
        {
            **by_name.get(job.name, {}),
            "name": job.name,
            "hosts": list(job.hosts) if isinstance(job.hosts, tuple) else job.hosts,
            "iterations": job.iterations,
            "start_us": job.start_us,
        }
        for job in scenario.jobs
    ]
    for entry in doc["workloads"]:
        if entry["hosts"] is None:
            del entry["hosts"]


def _changed_keys(scenario: Scenario, written: Scenario) -> dict[tuple[str, str], Any]:
    """What the caller changed from the scenario's file (CALLER_KEYS, workload.iterations)."""
    changes: dict[tuple[str, str], Any] = {}
    for section, key in CALLER_KEYS:
        value = getattr(getattr(scenario, section), key, None)
        if getattr(getattr(written, section), key, None) != value:
            changes[(section, key)] = value
    if (
        written.workload is not None
        and scenario.workload is not None
        and written.workload.iterations != scenario.workload.iterations
    ):
        changes[("workload", "iterations")] = scenario.workload.iterations
    return changes


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "source"}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _check_backend_keys(scenario: Scenario, backend: str) -> None:
    """Keys only the simulator models are refused, in one line, by the emulated fabric."""
    fabric = scenario.fabric
    emulated = backend in ("netns", "cluster")
    if emulated and isinstance(fabric, ClosSpec) and fabric.switch_latency_ns > 0:
        raise ScenarioError(
            f"fabric.switch_latency_ns: {fabric.switch_latency_ns:g} ns asked, but the emulated "
            "fabric's hops take what this machine takes; only the simulator models it "
            "(--backend sim or run.backend: sim)"
        )
    if emulated and isinstance(fabric, ClosSpec) and fabric.ecn_mark_point == "departure":
        raise ScenarioError(
            f"fabric.ecn_mark_point: {fabric.ecn_mark_point} asked, but the emulated fabric's "
            "markers judge a packet as it arrives at the port (before its queue); only the "
            "simulator marks at departure (--backend sim or run.backend: sim)"
        )


def _scenario_warnings(scenario: Scenario) -> list[str]:
    """Settings that run as asked but probably not as meant."""
    fabric, cnp_dscp = scenario.fabric, scenario.transport.cnp_dscp
    if isinstance(fabric, ClosSpec) and cnp_dscp not in fabric.priority_dscps:
        return [
            f"transport.cnp_dscp {cnp_dscp} is not in fabric.priority_dscps "
            f"{list(fabric.priority_dscps)}: CNPs queue behind data at every port, so DCQCN "
            "hears of congestion a queue late"
        ]
    return []


def simulated_time(scenario: Scenario, planned: PlannedWorkload) -> TdfChoice:
    """A simulation's timescale: no dilation, simulated time."""
    peak_bps = planned.world_size * target_rate_bps(scenario.fabric)
    return TdfChoice(1.0, "none: simulated time", peak_bps)


def reference_scenario(scenario: Scenario) -> Scenario:
    """The scenario the emulated run's reference simulates: no exporter of its own, and ECN
    marked on arrival unless the scenario says where (the emulated fabric marks on arrival;
    marked elsewhere, the runs would differ by DCQCN's feedback delay, not by the machine)."""
    quiet = dataclasses.replace(
        scenario.metrics,
        prometheus=dataclasses.replace(scenario.metrics.prometheus, enabled=False),
    )
    simulated = dataclasses.replace(scenario, metrics=quiet)
    if isinstance(scenario.fabric, ClosSpec) and scenario.fabric.ecn_mark_point == "auto":
        fabric = dataclasses.replace(scenario.fabric, ecn_mark_point="arrival")
        simulated = dataclasses.replace(simulated, fabric=fabric)
    return simulated


def _simulate_reference(
    scenario: Scenario, options: RunOptions, planned: PlannedWorkload, out_dir: Path
) -> SimReference:
    """`--reference sim`: the same planned workload in simulation first (it takes a fraction
    of the emulated run), written beside the run's folder as <folder>-reference-sim, and
    `sim.reference_draws - 1` more draws of it (the same flows on the same paths, other random
    marks) in its draws/<n> folders: what the model reads against itself."""
    folder = out_dir.with_name(out_dir.name + "-reference-sim")
    simulated = reference_scenario(scenario)
    count = scenario.sim.reference_draws
    options.say(
        f"the reference: simulating the same workload into {folder}"
        + (f", and {count - 1} more draws of it into {folder / DRAWS_DIR}" if count > 1 else "")
    )
    tables = []
    for n in range(count):
        draw = dataclasses.replace(
            simulated,
            sim=dataclasses.replace(simulated.sim, draw_seed=simulated.sim.draw_seed + n),
        )
        target = draw_folder(folder, n)
        sim_options = dataclasses.replace(
            options, out_dir=target, backend="sim", reference=None, report=False
        )
        with contextlib.ExitStack() as stack:
            writer = ResultsWriter(target, scenario_text=scenario_text(draw))
            run_planned(draw, sim_options, planned, simulated_time(draw, planned), writer, stack)
        tables.append(read_tables(target))
    return SimReference(folder, tables[0], tuple(tables[1:]))


def run_scenario(scenario: Scenario, options: RunOptions | None = None) -> RunResult:
    options = options or RunOptions()
    backend = backend_name(scenario, options.backend)
    options = dataclasses.replace(options, backend=backend)
    simulated = backend == "sim"
    _check_backend_keys(scenario, backend)
    if backend == "cluster":  # refused before anything is planned, written or joined
        from emulator.cluster.connect import check_security
        from emulator.cluster.placement import cluster_address

        check_security(cluster_address(scenario.run.cluster, options.cluster))
    # over a cluster the servers' actors need root (they check), not the driver
    if not simulated and backend != "cluster" and os.geteuid() != 0:
        raise EnvironmentProblem(
            "emulate run needs root (network namespaces, qdiscs, BPF); --backend sim does not"
        )
    with contextlib.ExitStack() as stack:
        prefix = stack.enter_context(trace_prefix(scenario))
        planned = plan_workload(
            scenario, prefix, fabric_ranks(scenario.fabric), target_rate_bps(scenario.fabric)
        )
        planned.warnings.extend(_scenario_warnings(scenario))
        for warning in planned.warnings:
            options.say(f"warning: {warning}")
        if isinstance(scenario.fabric, ClosSpec) and scenario.fabric.link_events:
            from fabrics.topology import build_clos

            resolve_link_events(scenario.fabric, build_clos(scenario.fabric))  # before bring-up
        if simulated:
            choice = simulated_time(scenario, planned)
        else:
            choice = choose_tdf(scenario, options, planned.world_size, planned)
        started = datetime.now(UTC)
        out_dir = options.out_dir or default_results_dir(
            Path(scenario.metrics.results_dir), scenario.name, started
        )
        writer = ResultsWriter(out_dir, scenario_text=scenario_text(scenario))
        reference = None
        if options.reference == "sim" and not simulated:
            reference = _simulate_reference(scenario, options, planned, out_dir)
        head = (
            f"{planned.world_size} ranks, {planned.collectives} collectives, ideal job time "
            f"{planned.ideal.job_time_s * 1e3:.3f} ms"
        )
        if simulated:
            options.say(f"{head}; simulated (backend sim: no dilation, simulated time)")
        else:
            options.say(
                f"{head}; TDF {choice.tdf:g} ({choice.how}"
                + (f", bound by {choice.bound_by}" if choice.bound_by else "")
                + f"), so about {planned.ideal.job_time_s * choice.tdf:.0f} s of wall time at best"
            )
        return run_planned(scenario, options, planned, choice, writer, stack, reference)
