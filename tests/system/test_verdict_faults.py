"""What the fidelity verdict's `ok` promises, held under injected faults.

The promise (docs/fidelity.md): a run whose verdict is ok measured each collective type's busbw
mean within BUSBW_TOLERANCE and its FCT p50 and p99 within FCT_TOLERANCE of the same job's
reference, the clean run at a factor where the machine has headroom (REFERENCE_TDF, twice this
test's; each measure's median over REFERENCE_RUNS of them). The tolerances are this job's own
run-to-run spread with room: clean runs of it read up to 8% apart in All-Reduce busbw and 15% in
its FCT p50 (32 flows; the eBPF marker's draws are not seeded), 2% in everything of the
All-to-All (2026-11-27).

One small job (the mixed All-Reduce and All-to-All of tests/integration/test_sim_backend, 8 MiB
each, 2 steps) runs at TDF 2000 clean, which must read ok and within the tolerance, then once with
each fault: another process busy on every core through the replay; a switch port's queue limit
cut below a burst mid-run (drops in a fabric the scenario calls lossless); a rank's worker
stopped for 400 ms mid-run (SIGSTOP, then SIGCONT); a cable down for 400 ms mid-run, which no
link event announces. Whenever a fault moved the results beyond the tolerance the verdict must
not read ok, and its reasons must name what the fault did (late ticks or the engine's delay,
the port's drops, the link that went down); each fault is checked to have happened, so no test
passes on a fault that missed. Every run's numbers are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from collectors.tables import RunTables, column, read_tables
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from fabrics.queues import DATA_CLASS_ID
from tests.integration.test_sim_backend import SMALL
from tests.system.noise import Try, on_a_noisy_machine

pytestmark = pytest.mark.system

TDF = 2000
REFERENCE_TDF = 4000
REFERENCE_RUNS = 3  # the reference is each measure's median over these clean runs
BUSBW_TOLERANCE = 0.10
FCT_TOLERANCE = 0.20
JOB = (
    SMALL.format(seed=0)
    .replace("dispatch_bytes: 262144", "dispatch_bytes: 8388608")
    .replace("allreduce_bytes: 2097152", "allreduce_bytes: 8388608")
    .replace("  backend: sim\n", "  time_dilation: TDF_VALUE\n")
)
FAULT_AFTER_S = 4.0  # wall seconds after the workers appear: inside the replay (~14 s at 2000)
FAULT_DEADLINE_S = 40.0  # wall: about 3x the clean replay at TDF 2000 (the faulted runs that end
# by themselves took 18-22 s in CI; a stalled one ends here)
PAUSE_S = 0.4
# what the verdict's reasons say for each fault's effect (emulator.timescale.verdict, collectors.fidelity)
NAMES = {
    "busy_cores": ("late", "engine's own delay", "pacing deficit", "CPU"),
    "queue_cut": ("switch ports dropped",),
    "stopped_worker": ("late", "engine's own delay", "pacing deficit"),
    "cable_down": ("links went down",),
}


def measures(tables: RunTables) -> dict[str, float]:
    """Each collective type's busbw mean and FCT p50 and p99 (what `ok` promises)."""
    out: dict[str, float] = {}
    types = set(column(tables.flows, "collective_type"))
    for ctype in sorted(types):
        fcts = [
            f
            for t, f in zip(
                column(tables.flows, "collective_type"), column(tables.flows, "fct_s"), strict=True
            )
            if t == ctype and f is not None
        ]
        busbw = [
            b
            for t, b in zip(
                column(tables.collectives, "collective_type"),
                column(tables.collectives, "busbw_bytes_per_s"),
                strict=True,
            )
            if t == ctype and b is not None
        ]
        out[f"{ctype} busbw"] = float(np.mean(busbw)) if busbw else 0.0
        out[f"{ctype} fct p50"] = float(np.percentile(fcts, 50)) if fcts else 0.0
        out[f"{ctype} fct p99"] = float(np.percentile(fcts, 99)) if fcts else 0.0
    return out


def off_by(run: dict[str, float], reference: dict[str, float]) -> dict[str, float]:
    """|run / reference - 1| of each measure (1.0 where the run lacks one)."""
    return {k: abs(run[k] / v - 1.0) if run.get(k) and v else 1.0 for k, v in reference.items()}


def _run(
    fabric_env: str, out: Path, tdf: int, deadline_s: float | None = None
) -> tuple[dict[str, object], RunTables]:
    """The job at `tdf`; with `deadline_s`, a run a fault stalled past it ends there (the
    engine's failure, its partial results written) and that is what is returned."""
    from emulator.engine.coordinator import EngineFailure

    path = out.with_suffix(".yaml")
    text = JOB.replace("TDF_VALUE", str(tdf))
    if deadline_s is not None:
        text = text.replace("  time_dilation:", f"  deadline_s: {deadline_s}\n  time_dilation:")
    path.write_text(text)
    try:
        result = run_scenario(
            load_scenario(path), RunOptions(out_dir=out, progress=False, fabric_prefix=fabric_env)
        )
    except EngineFailure:
        if deadline_s is None:
            raise
        return json.loads((out / "summary.json").read_text()), read_tables(out)
    return result.summary, read_tables(out)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """The job clean at REFERENCE_TDF, REFERENCE_RUNS times: each measure's median (its own
    state file and namespace prefix). One run was the reference before: the All-Reduce's FCT
    p99 is about its largest of 32 flows, and in one CI run every clean run at TDF 2000 read it
    13-36% above that one reference, as the busy-cores fault did (48%)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces)")
    tmp = tmp_path_factory.mktemp("reference")
    saved = os.environ.get("CHAKRA_EMULATOR_STATE_DIR")
    os.environ["CHAKRA_EMULATOR_STATE_DIR"] = str(tmp)
    runs = []
    seen: list[dict[str, object]] = []
    try:
        for n in range(REFERENCE_RUNS):
            summary, tables = _run(f"vr{os.getpid() % 100000}-", tmp / f"run{n}", REFERENCE_TDF)
            assert summary["fidelity"]["verdict"] == "ok", summary["fidelity"]
            runs.append(measures(tables))
            seen.append(_engine_seen(summary))
    finally:
        if saved is None:
            os.environ.pop("CHAKRA_EMULATOR_STATE_DIR", None)
        else:
            os.environ["CHAKRA_EMULATOR_STATE_DIR"] = saved
    median = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    print(f"reference ({REFERENCE_RUNS} runs at TDF {REFERENCE_TDF}, medians): {median}")
    for n, r in enumerate(runs):
        print(f"  reference run {n}: " + ", ".join(f"{k} {v:.4g}" for k, v in r.items()))
        print(f"    the engine: {seen[n]}")
    return median


# -- the faults: each runs in a thread beside the run and says what it did ---------------------


def _workers() -> list[int]:
    """This process's engine workers (multiprocessing children running spawn_main)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me and b"spawn_main" in cmdline:
            found.append(int(entry))
    return sorted(found)


def _when_replaying(deadline_s: float = 60.0) -> list[int]:
    """Wait for the engine's workers, then FAULT_AFTER_S into the replay; their pids."""
    end = time.monotonic() + deadline_s
    while not (pids := _workers()):
        if time.monotonic() > end:
            raise AssertionError("the engine's workers never appeared")
        time.sleep(0.05)
    time.sleep(FAULT_AFTER_S)
    return pids


def _sh(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=True).stdout


def _burn(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


@contextlib.contextmanager
def busy_cores(prefix: str, did: list[str]) -> Iterator[None]:
    """Another process busy on every core, from before the replay to its end (bounded)."""
    del prefix
    ctx = multiprocessing.get_context("fork")
    stop_at = time.monotonic() + 120.0
    burners = [ctx.Process(target=_burn, args=(stop_at,)) for _ in range(os.cpu_count() or 2)]
    for b in burners:
        b.start()
    did.append(f"{len(burners)} busy processes")
    try:
        yield
    finally:
        for b in burners:
            b.terminate()
        for b in burners:
            b.join(5)


def _in_thread(action: Callable[[], None], did: list[str]) -> Iterator[None]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(30)
    if errors:
        raise errors[0]
    assert did, "the fault did not happen"


@contextlib.contextmanager
def queue_cut(prefix: str, did: list[str]) -> Iterator[None]:
    """Leaf l0's port to h0 (All-to-All incast and All-Reduce meet there) holds 6000 bytes from
    mid-run on: less than two full-size packets."""
    ns, dev = f"{prefix}l0", "l0-h0"

    def cut() -> None:
        _when_replaying()
        qdiscs = json.loads(_sh("tc", "-j", "-n", ns, "qdisc", "show", "dev", dev))
        (fifo,) = [
            q for q in qdiscs if q.get("kind") == "bfifo" and q.get("parent") == DATA_CLASS_ID
        ]
        _sh("tc", "-n", ns, "qdisc", "change", "dev", dev, "parent", fifo["parent"],
            "handle", fifo["handle"], "bfifo", "limit", "6000")  # fmt: skip
        did.append(f"{ns}:{dev} bfifo limit 6000 (was {fifo.get('options', {}).get('limit')})")

    yield from _in_thread(cut, did)


@contextlib.contextmanager
def stopped_worker(prefix: str, did: list[str]) -> Iterator[None]:
    """One engine worker stopped for PAUSE_S mid-run."""
    del prefix

    def stop() -> None:
        pid = _when_replaying()[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(PAUSE_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        did.append(f"worker {pid} stopped {PAUSE_S} s")

    yield from _in_thread(stop, did)


def _tx_packets(ns: str) -> dict[str, int]:
    """Packets each of leaf l0's uplinks sent so far."""
    links = json.loads(_sh("ip", "-n", ns, "-s", "-j", "link", "show"))
    return {
        link["ifname"]: int(link["stats64"]["tx"]["packets"])
        for link in links
        if link["ifname"].startswith("l0-s")
    }


def _busiest_uplink(ns: str) -> str:
    """The uplink carrying the most packets over the next 200 ms (a cable in use)."""
    before = _tx_packets(ns)
    time.sleep(0.2)
    after = _tx_packets(ns)
    return max(after, key=lambda dev: after[dev] - before.get(dev, 0))


@contextlib.contextmanager
def cable_down(prefix: str, did: list[str]) -> Iterator[None]:
    """Leaf l0's first uplink down for PAUSE_S mid-run, announced by nothing."""
    ns = f"{prefix}l0"

    def flap() -> None:
        _when_replaying()
        uplink = _busiest_uplink(ns)
        _sh("ip", "-n", ns, "link", "set", "dev", uplink, "down")
        try:
            time.sleep(PAUSE_S)
        finally:
            _sh("ip", "-n", ns, "link", "set", "dev", uplink, "up")
        did.append(f"{ns}:{uplink} down {PAUSE_S} s")

    yield from _in_thread(flap, did)


FAULTS = {
    "busy_cores": busy_cores,
    "queue_cut": queue_cut,
    "stopped_worker": stopped_worker,
    "cable_down": cable_down,
}


def _judge(
    tr: Try, summary: dict[str, object], tables: RunTables, reference: dict[str, float]
) -> tuple[str, list[str], bool]:
    fidelity = summary["fidelity"]
    assert isinstance(fidelity, dict)
    verdict, reasons = fidelity["verdict"], list(fidelity.get("reasons") or [])
    off = off_by(measures(tables), reference)
    inside = all(v <= (BUSBW_TOLERANCE if "busbw" in k else FCT_TOLERANCE) for k, v in off.items())
    tr.note(verdict=verdict, inside=inside, **{k: round(v, 3) for k, v in off.items()})
    tr.note(reasons=reasons)
    tr.note(**_engine_seen(summary))
    return str(verdict), reasons, inside


def _engine_seen(summary: dict[str, object]) -> dict[str, object]:
    """What the verdict's checks saw of the engine (printed with every try: a clean try in CI
    once read ok while its All-Reduce FCT p99 was 0.263 off the reference, outside the tolerance,
    and nothing printed said whether the engine had seen anything; 32 clean runs here read the
    All-Reduce FCT p99 within 1471-1848 us, the reference's median about 1700)."""
    engine = summary.get("engine")
    if not isinstance(engine, dict):
        return {}
    wait = engine.get("receive_wait") or {}
    return {
        "delay_share_pct": {
            k[:6]: (round(v["fct_share"] * 100, 2), round(v["p99_fct_shift"] * 100, 1))
            for k, v in (engine.get("delay_share") or {}).items()
        },
        "wait_p99_max_ms": (wait.get("wall_p99_ms"), wait.get("wall_max_ms")),
        "tick_max_ms": [round(t["max_s"] * 1e3, 1) for t in engine.get("worker_tick_lateness", [])],
        "deficit_pct": [
            round(p["lost_bytes"] / max(p["sent_bytes"], 1) * 100, 2)
            for p in engine.get("worker_pacing", [])
        ],
    }


def test_a_clean_run_reads_ok_within_the_tolerance(
    reference: dict[str, float], fabric_env: str, tmp_path: Path
) -> None:
    def clean(tr: Try) -> None:
        summary, tables = _run(fabric_env, tmp_path / f"clean-{tr.index}", TDF)
        verdict, _, inside = _judge(tr, summary, tables, reference)
        assert verdict == "ok" and inside

    on_a_noisy_machine(clean, what="the clean job")


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_the_verdict_names_a_fault_that_moved_the_results(
    reference: dict[str, float], fabric_env: str, tmp_path: Path, fault: str
) -> None:
    did: list[str] = []
    tr = Try(1, 1)
    with FAULTS[fault](fabric_env, did):
        # a fault may stall a flow for good (queue_cut: go-back-N behind a 6000-byte queue once
        # ran past the run's own 295 s deadline in CI): the run then ends partial at 3x its
        # clean time, and the verdict must still name the fault
        summary, tables = _run(fabric_env, tmp_path / fault, TDF, deadline_s=FAULT_DEADLINE_S)
    tr.note(fault=did, partial=summary.get("partial"), stopped_by=summary.get("stopped_by"))
    verdict, reasons, inside = _judge(tr, summary, tables, reference)
    print(tr)
    assert did, f"{fault} did not happen"
    if summary.get("partial"):
        # stalled: the results are not what `ok` promises, and the verdict says why
        assert verdict != "ok", f"{fault}: a partial run read ok: {tr}"
    if fault == "queue_cut":
        # it hit traffic: packets were lost (and sent again, where the flows got that far)
        lost = sum(column(tables.flows, "retransmitted_packets")) > 0 or any(
            "switch ports dropped" in r for r in reasons
        )
        assert lost, f"{fault} hit no traffic"
    if fault == "cable_down":
        # whether or not it cost packets (the routes skip a link that is down at once), an
        # outage the scenario does not have is always said
        assert verdict != "ok", f"{fault}: {tr}"
    if not inside:
        assert verdict != "ok", f"{fault} moved the results beyond the tolerance: {tr}"
    if verdict != "ok":
        named = [r for r in reasons if any(n in r for n in NAMES[fault])]
        assert named, f"{fault}: the verdict's reasons do not name it: {reasons}"
