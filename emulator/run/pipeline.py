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
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from collectors.reference import DRAWS_DIR, draw_folder
from collectors.results import ResultsWriter, default_results_dir
from collectors.tables import read_tables
from emulator.backends import TimescaleRequest, backend_for
from emulator.errors import InputError
from emulator.planning.workload import PlannedWorkload, plan_workload, trace_prefix
from emulator.run.execute import SimReference, run_planned
from emulator.run.options import RunOptions, RunResult, backend_options
from emulator.scenario.model import Scenario
from emulator.timescale.probe import PROBE_DELAY_LIMIT, PROBE_WALL_S
from emulator.timescale.tdf import TdfChoice
from emulator.timescale.verdict import engine_delay_reason, engine_delay_shares, flow_delays
from fabrics.ownership import owned_folder
from fabrics.spec import ClosSpec


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
    """Every key of a section (a dataclass field of the scenario: run, fabric, sim, ...) that
    the caller changed from the file (a study's seed, --reference sim's marking point and draws,
    the sensitivity study's link rates, --iterations), with its value as YAML would hold it. A
    section whose kind changed (another fabric kind) is not a caller's change."""
    changes: dict[tuple[str, str], Any] = {}
    for section in dataclasses.fields(scenario):
        ours, theirs = getattr(scenario, section.name), getattr(written, section.name)
        if not dataclasses.is_dataclass(ours) or type(ours) is not type(theirs):
            continue
        for f in dataclasses.fields(ours):
            value = getattr(ours, f.name)
            if f.compare and value != getattr(theirs, f.name):
                is_record = dataclasses.is_dataclass(value) and not isinstance(value, type)
                plain = dataclasses.asdict(value) if is_record else value
                changes[(section.name, f.name)] = _plain(plain)
    return changes


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "source"}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


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
            choice = backend_for(draw, "sim").timescale(
                TimescaleRequest(draw, backend_options(sim_options), planned, _no_probe)
            )
            run_planned(draw, sim_options, planned, choice, writer, stack)
        tables.append(read_tables(target))
    return SimReference(folder, tables[0], tuple(tables[1:]))


def run_scenario(scenario: Scenario, options: RunOptions | None = None) -> RunResult:
    options = options or RunOptions()
    backend = backend_for(scenario, options.backend)
    options = dataclasses.replace(options, backend=backend.name)
    # refused before anything is planned, written or joined
    if options.reference is not None and backend.simulated:
        raise InputError(f"--reference {options.reference}: the run is already a simulation")
    backend.check(scenario, backend_options(options))
    with contextlib.ExitStack() as stack:
        prefix = stack.enter_context(trace_prefix(scenario))
        fabric = scenario.fabric
        planned = plan_workload(scenario, prefix, fabric.ranks, fabric.rank_rate_bps)
        planned.warnings.extend(_scenario_warnings(scenario) + backend.warnings(scenario))
        for warning in planned.warnings:
            options.say(f"warning: {warning}")
        choice = backend.timescale(
            TimescaleRequest(
                scenario,
                backend_options(options),
                planned,
                lambda tdf: probe_replay(scenario, options, planned, tdf, backend.failures),
            )
        )
        started = datetime.now(UTC)
        out_dir = options.out_dir or default_results_dir(
            Path(scenario.metrics.results_dir), scenario.name, started
        )
        writer = ResultsWriter(out_dir, scenario_text=scenario_text(scenario))
        reference = None
        if options.reference == "sim" and not backend.simulated:
            reference = _simulate_reference(scenario, options, planned, out_dir)
        head = (
            f"{planned.world_size} ranks, {planned.collectives} collectives, ideal job time "
            f"{planned.ideal.job_time_s * 1e3:.3f} ms"
            + (f" ({scenario.run.ideal})" if scenario.run.ideal != "max_min" else "")
        )
        if backend.simulated:
            options.say(f"{head}; simulated (backend {backend.name}: no dilation, simulated time)")
        else:
            options.say(
                f"{head}; TDF {choice.tdf:g} ({choice.how}"
                + (f", bound by {choice.bound_by}" if choice.bound_by else "")
                + f"), so about {planned.ideal.job_time_s * choice.tdf:.0f} s of wall time at best"
            )
        return run_planned(scenario, options, planned, choice, writer, stack, reference)


def _no_probe(tdf: float) -> dict[str, Any]:
    raise AssertionError(f"a simulation is not probed (TDF {tdf:g})")


def probe_replay(
    scenario: Scenario,
    options: RunOptions,
    planned: PlannedWorkload,
    tdf: float,
    failures: tuple[type[BaseException], ...],
) -> dict[str, Any]:
    """A probe for auto TDF (emulator.timescale.probe): a PROBE_WALL_S replay of the scenario at
    `tdf` on its backend (results in a temporary folder, no exporter, no output); the engine's
    metadata, with the flows' own view of the engine's delay under "engine_delay_reason"."""
    metrics = scenario.metrics
    quiet = dataclasses.replace(
        scenario,
        run=dataclasses.replace(scenario.run, deadline_s=PROBE_WALL_S, time_dilation=tdf),
        metrics=dataclasses.replace(
            metrics,
            prometheus=dataclasses.replace(metrics.prometheus, enabled=False, pushgateway_url=None),
        ),
    )
    probe_options = dataclasses.replace(
        options, progress=False, report=False, tdf=tdf, say=lambda _m: None
    )
    choice = TdfChoice(tdf, "probe", 0.0)
    with owned_folder("emulate-probe-") as tmp:  # `emulate clean` removes it after a kill
        writer = ResultsWriter(Path(tmp) / "probe", scenario_text="probe\n")
        try:
            with contextlib.ExitStack() as stack:
                result = run_planned(quiet, probe_options, planned, choice, writer, stack)
            summary = result.summary
        except failures as exc:
            if "not finished after" not in str(exc):
                raise  # a failure, not the probe's deadline
            # the deadline stopped the probe: its partial summary has the workers' numbers
            summary = json.loads((writer.target / "summary.json").read_text())
        delayed = engine_delay_reason(
            engine_delay_shares(flow_delays(read_tables(writer.target))), PROBE_DELAY_LIMIT
        )
    engine = summary.get("engine")
    return {**(engine if isinstance(engine, dict) else {}), "engine_delay_reason": delayed}
