"""Bench: the packet-level simulator (backend sim) against the emulated run of the same scenario,
its memory per flow and per port, and how it grows from 16 to 64 and 128 hosts.

Run from the repository root: `python -m bench.sim [--timeout S] [--no-emulated] [--no-scaling]
[--json PATH]`; as root for the emulated peer (without root it is skipped, and the output says so).

Ours: scenarios/moe_mix.yaml simulated (run_scenario, backend sim), in a child process of its own.
Peer, measured in the same run: the same scenario emulated at the TDF auto chooses (its cached
calibration and probes count in the whole call's wall time, not in the replay's). Printed: both
wall times (the whole run_scenario call, and summary.json wall_time.replay_s), their ratio
emulated / simulated (the issue's target is >= 4), the TDF, busbw per collective type side by
side, and the simulator's packet hops and events per wall second of its replay.
Memory: each simulation runs alone in `python -m bench.sim --child run` and reports its own
ru_maxrss at the end (the whole call: planning, replay, results folder with its plots); a
baseline child (`--child baseline`) imports the same modules and builds the same simulated
fabric without traffic. Net = peak - baseline, per planned flow and per port.
Scaling (--scaling, the default): the moe_mix workload at 16 (moe_mix.yaml), 64 (moe_mix_128.yaml
cut to 4 leaves, written to a temporary file) and 128 hosts (moe_mix_128.yaml): wall time, peak
RSS, flows and packet hops, the growth 64/16 and 128/16 of each side by side, and the memory per
host: what each host beyond the 16 adds to the peak (and per flow), the fixed costs cancelled.
The fabric's code (--fabric-peer, the default): these runs use the fabric in C where it is built
(sim.native_fabric auto; the table says which ran); moe_mix.yaml and an 8:1 DCQCN incast at 40
Gb/s (INCAST: 8 senders into one receiver through a leaf, 60 ms of simulated time) are also run
with the Python fabric (sim.native_fabric: off), each in its own child: packet hops per wall
second and peak memory of both, their ratios, and whether the two wrote the same tables.
Every run has the live exporter off (no port to collide, the same work on both sides) and
run.deadline_s = --timeout (--emulated-timeout for the emulated run); a child that overruns it
by more than CHILD_GRACE_S (planning and writing are outside the deadline) is killed.
Nothing is asserted: a table is printed, and --json PATH writes the numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from emulator.backends.sim.backend import sim_params
from emulator.run.options import RunOptions
from emulator.run.pipeline import run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from emulator.sim.fabric import build_fabric
from emulator.sim.replay import SimReplay
from fabrics.topology import build_clos

BENCH = "sim"
REPO = Path(__file__).resolve().parents[1]
MOE_MIX = REPO / "scenarios" / "moe_mix.yaml"
MOE_MIX_128 = REPO / "scenarios" / "moe_mix_128.yaml"
CHILD_GRACE_S = 600.0  # a child's planning and results folder, outside run.deadline_s
TARGET_RATIO = 4.0  # the target: the simulation at least 4x faster than the emulation
# the tables a simulated run writes that must not depend on which code ran the fabric
SAME_TABLES = ("flows", "collectives", "ports", "nic", "queue_pairs", "attribution", "marks")

# An 8:1 incast with DCQCN at 40 Gb/s: 8 senders on one leaf into a ninth host, 37.5 MB each
# (the bottleneck's 60 ms); the case the issue measured against htsim
INCAST = {
    "name": "incast_8to1",
    "description": "8:1 DCQCN incast at 40 Gb/s, 60 ms of the receiver's link (bench.sim)",
    "traffic": [
        {
            "name": "incast",
            "kind": "incast",
            "senders": [1, 2, 3, 4, 5, 6, 7, 8],
            "receiver": 0,
            "qps": 1,
            "message_bytes": 1 << 20,
            "bytes_per_pair": 37_500_000,
            "congestion_control": "dcqcn",
        }
    ],
    "fabric": {
        "kind": "clos",
        "hosts_per_leaf": 9,
        "leaves": 1,
        "spines": 1,
        "host_link_gbps": 40,
        "fabric_link_gbps": 40,
    },
    "run": {"backend": "sim"},
}


def prepared(path: Path, deadline_s: float, native: str = "auto") -> Scenario:
    """The scenario with run.deadline_s set, the live exporter off and sim.native_fabric."""
    scenario = load_scenario(path)
    metrics = scenario.metrics
    quiet = dataclasses.replace(
        metrics, prometheus=dataclasses.replace(metrics.prometheus, enabled=False)
    )
    run = dataclasses.replace(scenario.run, deadline_s=deadline_s)
    sim = dataclasses.replace(scenario.sim, native_fabric=native)  # type: ignore[arg-type]
    return dataclasses.replace(scenario, metrics=quiet, run=run, sim=sim)


def extract(summary: dict[str, Any]) -> dict[str, Any]:
    """What the bench reads from a summary.json."""
    engine = summary.get("engine") or {}
    fabric = summary.get("fabric_backend") or {}
    return {
        "partial": summary.get("partial"),
        "verdict": (summary.get("fidelity") or {}).get("verdict"),
        "tdf": summary.get("tdf"),
        "tdf_how": (summary.get("time_dilation") or {}).get("how"),
        "replay_wall_s": (summary.get("wall_time") or {}).get("replay_s"),
        "job_time_s": summary.get("job_time_s"),
        "flows": (summary.get("flows") or {}).get("planned"),
        "ports": fabric.get("ports", engine.get("ports")),
        "events": engine.get("events"),
        "packet_hops": engine.get("packet_hops"),
        "packet_hops_per_wall_s": engine.get("packet_hops_per_wall_s"),
        "engine_wall_s": engine.get("wall_s"),
        "fabric_code": engine.get("fabric_code"),
        "replay_max_rss_kb": engine.get("max_rss_kb"),
        "busbw_bytes_per_s": {
            ctype: c.get("busbw_mean_bytes_per_s")
            for ctype, c in (summary.get("collectives") or {}).items()
        },
    }


def measure(scenario: Scenario, out_dir: Path, backend: str | None) -> dict[str, Any]:
    """One run_scenario call: its wall time and what its summary says (a stopped or failed
    run still wrote its folder, marked partial: read from there, with the error)."""
    options = RunOptions(out_dir=out_dir, backend=backend, report=False, progress=False)
    error = None
    started = time.perf_counter()
    try:
        summary = run_scenario(scenario, options).summary
    except Exception as exc:  # reported in the table and the JSON, and the exit code is 1
        error = f"{type(exc).__name__}: {exc}"
        written = out_dir / "summary.json"
        summary = json.loads(written.read_text()) if written.is_file() else {}
    return {"wall_s": time.perf_counter() - started, "error": error, **extract(summary)}


def child_main(
    mode: str, path: Path, out_dir: Path, deadline_s: float, result: Path, native: str
) -> int:
    if mode == "run":
        doc = measure(prepared(path, deadline_s, native), out_dir, "sim")
    else:  # the baseline: the same imports and the same fabric, no traffic
        scenario = load_scenario(path)
        fabric = build_fabric(
            build_clos(scenario.fabric),
            sim_params(scenario),
            seed=scenario.run.seed,
            events=SimReplay.event_list(),
        )
        doc = {"ports": len(fabric.ports), "error": None}
    doc["max_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    result.write_text(json.dumps(doc))
    return 0


def child(
    mode: str, path: Path, work: Path, tag: str, deadline_s: float, native: str = "auto"
) -> dict[str, Any]:
    """`python -m bench.sim --child MODE` on `path`, alone in its process; killed (by its
    handle, subprocess.run's timeout) if it overruns the deadline by CHILD_GRACE_S."""
    result = work / f"{tag}-{mode}.json"
    argv = [sys.executable, "-m", "bench.sim", "--child", mode, "--scenario", str(path)]
    argv += ["--out", str(work / f"{tag}-{mode}"), "--timeout", str(deadline_s)]
    argv += ["--result", str(result), "--native", native]
    limit_s = deadline_s + CHILD_GRACE_S
    try:
        proc = subprocess.run(argv, cwd=REPO, timeout=limit_s, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the child did not finish within {limit_s:g} s and was killed"}
    if proc.returncode != 0 or not result.is_file():
        return {"error": f"the child exited with {proc.returncode} and no result"}
    doc: dict[str, Any] = json.loads(result.read_text())
    return doc


def simulate(
    path: Path, work: Path, tag: str, deadline_s: float, native: str = "auto"
) -> dict[str, Any]:
    """A simulated run and its baseline, each in its own child, with the net memory."""
    run = child("run", path, work, tag, deadline_s, native)
    run["folder"] = str(work / f"{tag}-run")
    base = child("baseline", path, work, tag, deadline_s, native)
    run["baseline_max_rss_kb"] = base.get("max_rss_kb")
    run["ports"] = run.get("ports") or base.get("ports")
    if base.get("error"):
        run["error"] = run.get("error") or f"baseline: {base['error']}"
    peak, floor = run.get("max_rss_kb"), base.get("max_rss_kb")
    net = peak - floor if peak is not None and floor is not None else None
    run["net_rss_kb"] = net
    run["net_kb_per_flow"] = net / run["flows"] if net is not None and run.get("flows") else None
    run["net_kb_per_port"] = net / run["ports"] if net is not None and run.get("ports") else None
    return run


def fabric_peer(
    path: Path, work: Path, tag: str, deadline_s: float, ours: dict[str, Any] | None = None
) -> dict[str, dict[str, Any]]:
    """`path` simulated with the fabric in C (or `ours`, already run) and in Python."""
    c = ours if ours is not None else simulate(path, work, f"{tag}-c", deadline_s, "auto")
    python = simulate(path, work, f"{tag}-python", deadline_s, "off")
    python["same_tables_as_c"] = same_tables(c, python)  # while both folders exist
    return {"c": c, "python": python}


def same_tables(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """Whether two runs' folders hold the same tables, byte for byte (None: one is missing)."""
    if not a.get("folder") or not b.get("folder"):
        return None
    first, second = Path(a["folder"]), Path(b["folder"])
    names = [n for n in SAME_TABLES if (first / f"{n}.parquet").exists()]
    if not names:
        return None
    return all(
        (second / f"{n}.parquet").exists()
        and (first / f"{n}.parquet").read_bytes() == (second / f"{n}.parquet").read_bytes()
        for n in names
    )


def print_fabric_peers(peers: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Each case's C fabric beside its Python fabric; returns the ratios C / Python."""
    rows, out = [], {}
    for case, pair in peers.items():
        c, py = pair["c"], pair["python"]
        speed = ratio(c.get("packet_hops_per_wall_s"), py.get("packet_hops_per_wall_s"))
        memory = ratio(c.get("max_rss_kb"), py.get("max_rss_kb"))
        same = py.get("same_tables_as_c")
        out[case] = {"hops_per_s": speed, "peak_rss": memory, "same_tables": same}
        rows.append(
            [
                case,
                fmt(c.get("fabric_code")),
                fmt(c.get("packet_hops"), digits=4),
                fmt(c.get("replay_wall_s"), digits=4),
                fmt(py.get("replay_wall_s"), digits=4),
                fmt(c.get("packet_hops_per_wall_s"), digits=4),
                fmt(py.get("packet_hops_per_wall_s"), digits=4),
                fmt(speed),
                fmt(c.get("max_rss_kb"), 1024.0, 4),
                fmt(py.get("max_rss_kb"), 1024.0, 4),
                {True: "yes", False: "NO", None: "-"}[same],
            ]
        )
    print()
    header = ["fabric in C / Python", "code", "packet hops", "replay s C", "replay s Py"]
    header += ["hops/s C", "hops/s Py", "C/Py", "peak MB C", "peak MB Py", "same tables"]
    table(header, rows)
    return out


def emulated(work: Path, deadline_s: float, wanted: bool) -> dict[str, Any]:
    if not wanted:
        return {"skipped": "--no-emulated"}
    if os.geteuid() != 0:
        return {"skipped": "not root: the emulated fabric needs network namespaces, qdiscs, BPF"}
    return measure(prepared(MOE_MIX, deadline_s), work / "emulated", None)


def scenario_64(work: Path) -> Path:
    """moe_mix_128.yaml cut to 4 leaves x 16 hosts (64 ranks), as a temporary file."""
    doc = yaml.safe_load(MOE_MIX_128.read_text())
    doc["name"] = "moe_mix_64"
    doc["description"] = "moe_mix_128.yaml cut to 4 leaves x 16 hosts (bench.sim)"
    doc["workload"]["generate"]["ranks"] = 64
    doc["fabric"]["leaves"] = 4
    path = work / "moe_mix_64.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, int | float) and isinstance(b, int | float) and b else None


def fmt(value: Any, scale: float = 1.0, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int | float):
        scaled = value / scale
        return f"{scaled:,.0f}" if abs(scaled) >= 10**digits else f"{scaled:.{digits}g}"
    return str(value)


def table(header: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell, the first left-aligned, the others right."""
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        cells = zip(line, widths, strict=True)
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(cells)))


def print_comparison(sim: dict[str, Any], emu: dict[str, Any]) -> dict[str, float | None]:
    """The simulated and emulated moe_mix side by side; returns the ratios emulated/simulated."""
    rows, out = [], {}
    for label, key, scale in (
        ("run_scenario wall s", "wall_s", 1.0),
        ("replay wall s", "replay_wall_s", 1.0),
        ("job time ms", "job_time_s", 1e-3),
    ):
        r = out[key] = ratio(emu.get(key), sim.get(key))
        rows.append([label, fmt(sim.get(key), scale), fmt(emu.get(key), scale), fmt(r)])
    rows.append([f"  (target: wall ratios >= {TARGET_RATIO:g})", "", "", ""])
    how = f" ({emu['tdf_how']})" if emu.get("tdf_how") else ""
    rows.append(["TDF", "1 (simulated)", fmt(emu.get("tdf"), digits=6) + how, ""])
    busbw_sim, busbw_emu = sim.get("busbw_bytes_per_s") or {}, emu.get("busbw_bytes_per_s") or {}
    for ctype in sorted(set(busbw_sim) | set(busbw_emu)):
        s, e = busbw_sim.get(ctype), busbw_emu.get(ctype)
        rows.append([f"busbw {ctype} GB/s", fmt(s, 1e9), fmt(e, 1e9), fmt(ratio(e, s))])
    rows.append(["fidelity verdict", fmt(sim.get("verdict")), fmt(emu.get("verdict")), ""])
    table(["moe_mix.yaml, 16 hosts", "simulated", "emulated", "emulated/simulated"], rows)
    events_per_s = ratio(sim.get("events"), sim.get("engine_wall_s"))
    print(
        f"simulator: {fmt(sim.get('packet_hops_per_wall_s'), digits=4)} packet hops and "
        f"{fmt(events_per_s, digits=4)} events per wall second of replay"
    )
    if emu.get("skipped"):
        print(f"emulated peer skipped: {emu['skipped']}")
    elif emu.get("error") or emu.get("partial"):
        print(f"emulated run {'partial' if emu.get('partial') else 'failed'}: {emu.get('error')}")
    return out


def print_runs(runs: dict[int, dict[str, Any]]) -> None:
    columns = (  # (header, key, scale, significant digits)
        ("wall s", "wall_s", 1.0, 4),
        ("replay s", "replay_wall_s", 1.0, 4),
        ("peak MB", "max_rss_kb", 1024.0, 4),
        ("at replay end MB", "replay_max_rss_kb", 1024.0, 4),
        ("baseline MB", "baseline_max_rss_kb", 1024.0, 4),
        ("net MB", "net_rss_kb", 1024.0, 4),
        ("flows", "flows", 1.0, 7),
        ("ports", "ports", 1.0, 5),
        ("net kB/flow", "net_kb_per_flow", 1.0, 3),
        ("net kB/port", "net_kb_per_port", 1.0, 3),
        ("packet hops", "packet_hops", 1.0, 4),
        ("hops/wall s", "packet_hops_per_wall_s", 1.0, 3),
    )
    rows = [
        [str(hosts)] + [fmt(r.get(key), scale, digits) for _, key, scale, digits in columns]
        for hosts, r in runs.items()
    ]
    print()
    table(["hosts", *(c[0] for c in columns)], rows)
    for hosts, r in runs.items():
        if r.get("error"):
            print(f"{hosts} hosts: {r['error']}")


def growth(runs: dict[int, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    keys: tuple[str, ...] = (
        "wall_s",
        "replay_wall_s",
        "max_rss_kb",
        "net_rss_kb",
        "flows",
        "packet_hops",
    )
    out = {
        f"{hosts}/16": {k: ratio(r.get(k), runs[16].get(k)) for k in keys}
        for hosts, r in runs.items()
        if hosts != 16
    }
    # memory per host: what each host beyond the 16 adds to the peak (the modules, the fabric's
    # fixed part and the results stage's fixed part cancel out), and per flow
    base = runs[16]
    for hosts, r in runs.items():
        if hosts == 16:
            continue
        added = None
        if r.get("max_rss_kb") is not None and base.get("max_rss_kb") is not None:
            added = (r["max_rss_kb"] - base["max_rss_kb"]) / 1024.0
        flows = (r.get("flows") or 0) - (base.get("flows") or 0)
        row = out[f"{hosts}/16"]
        row["peak_mb_per_added_host"] = None if added is None else added / (hosts - 16)
        row["peak_kb_per_added_flow"] = None if added is None or not flows else added * 1024 / flows
    print()
    header = ["growth", "wall", "replay", "peak RSS", "net RSS", "flows", "packet hops"]
    header += ["peak MB per added host", "peak kB per added flow"]
    keys += ("peak_mb_per_added_host", "peak_kb_per_added_flow")
    table(header, [[label, *(fmt(g.get(k)) for k in keys)] for label, g in out.items()])
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, what in (
        ("timeout", "each simulated run's"),
        ("emulated-timeout", "the emulated run's"),
    ):
        parser.add_argument(f"--{flag}", type=float, default=3600.0, help=f"{what} deadline_s")
    for flag, what in (
        ("emulated", "the emulated peer (root)"),
        ("scaling", "64 and 128 hosts"),
        ("fabric-peer", "moe_mix and an 8:1 incast with the Python fabric"),
    ):
        parser.add_argument(
            f"--{flag}", action=argparse.BooleanOptionalAction, default=True, help=f"also {what}"
        )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the numbers here")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep the runs' results folders in DIR (a new folder; default: removed)",
    )
    parser.add_argument("--child", choices=("run", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--scenario", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--native", default="auto", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(
            args.child, args.scenario, args.out, args.timeout, args.result, args.native
        )
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep: {args.keep} exists; name a new folder")
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        work = Path(tmp)
        runs = {16: simulate(MOE_MIX, work, "hosts16", args.timeout)}
        if args.scaling:
            runs[64] = simulate(scenario_64(work), work, "hosts64", args.timeout)
            runs[128] = simulate(MOE_MIX_128, work, "hosts128", args.timeout)
        peers: dict[str, dict[str, dict[str, Any]]] = {}
        if args.fabric_peer:
            incast = work / "incast_8to1.yaml"
            incast.write_text(yaml.safe_dump(INCAST, sort_keys=False))
            peers["incast 8:1"] = fabric_peer(incast, work, "incast", args.timeout)
            peers["moe_mix"] = fabric_peer(MOE_MIX, work, "hosts16", args.timeout, runs[16])
        emu = emulated(work, args.emulated_timeout, args.emulated)
        if args.keep is not None:
            shutil.copytree(work, args.keep)  # the results folders, to look into afterwards
    doc: dict[str, Any] = {"bench": BENCH, "simulated": runs, "emulated": emu}
    doc["ratios_emulated_over_simulated"] = print_comparison(runs[16], emu)
    print_runs(runs)
    if peers:
        doc["fabric_peers"] = peers
        doc["ratios_c_over_python"] = print_fabric_peers(peers)
    if args.scaling:
        doc["growth"] = growth(runs)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    every = [*runs.values(), emu, *(r for pair in peers.values() for r in pair.values())]
    failed = [r["error"] for r in every if r.get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
