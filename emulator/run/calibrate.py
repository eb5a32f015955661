"""What this machine can emulate on time: a load curve measured once and cached.

The measurement is shaped like the run, with the run's own code: the scenario's Clos (its hosts
per leaf, leaves, spines and parallel links, so packets cross as many hops) with links far
faster than the machine, the scenario's ranks, and every rank paced at its NIC's line rate,
spread over every other rank on `qps_per_peer` queue pairs each (an All-to-All's shape: the most
active QPs a run's worker serves per tick, and its per-tick work grows with them), DCQCN on as in
a run. It is repeated at growing offered loads (aggregate wall-clock bits per second) until the
engine no longer delivers what it offers. Each point records what the fidelity verdict
judges (emulator.run.verdict): the share of the offered load delivered (the pacing deficit), the
p99 and maximum lateness of the workers' ticks, and the busiest worker's CPU share.

emulator.run.tdf turns the curve into the lowest TDF at which a scenario's peak load (every NIC
at line rate) lands on a point where those checks hold once lateness is divided by that TDF.

The measurement runs the engine's data path the run will take (`engine.native`: the native C
burst path or the Python one, which carry different loads per core), and the result is cached
per machine (CPU model, core count, kernel release), shape, path MTU and data path, in
$CHAKRA_EMULATOR_CACHE_DIR or ~/.cache/chakra-emulator, because it takes several seconds and
the machine does not change between runs; `emulate run --recalibrate` measures again.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from emulator.engine.params import OffloadChoice
from emulator.errors import EnvironmentProblem

CACHE_ENV = "CHAKRA_EMULATOR_CACHE_DIR"
CACHE_FILE = "calibration.json"
CALIBRATION_VERSION = 3  # 3: keyed by the data path (native or Python)
LINK_GBPS = 1000.0  # far above what the machine carries: the links never limit the measurement
# Offered aggregate loads, wall-clock bits per second; the curve stops at the first point that
# delivers less than STOP_RATIO of its offer.
LOADS_BPS = (0.25e9, 0.5e9, 1e9, 2e9, 3e9, 4e9, 6e9, 8e9, 12e9, 16e9)
STOP_RATIO = 0.8


@dataclass(frozen=True)
class LoadPoint:
    """One measured load: offered and delivered aggregate payload bits per wall second, the
    workers' worst tick lateness (p99 and max over workers, wall seconds) and CPU share."""

    offered_bps: float
    delivered_bps: float
    tick_late_p99_s: float
    tick_late_max_s: float
    worker_busy_max: float

    @property
    def delivered_ratio(self) -> float:
        return self.delivered_bps / self.offered_bps if self.offered_bps > 0 else 0.0


@dataclass(frozen=True)
class Calibration:
    capacity_bps: float  # the most payload bits per wall second delivered on pace (>= 95%)
    flows: int
    path_mtu_bytes: int
    measured_s: float
    machine: str
    measured_at: str
    cached: bool = False
    points: tuple[LoadPoint, ...] = ()
    data_path: str = "python"  # the engine's data path it measured (emulator.engine.native_path)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Calibration:
        points = tuple(LoadPoint(**p) for p in entry.get("points", ()))
        return cls(**{**entry, "points": points})


@dataclass(frozen=True)
class Shape:
    """What of a scenario the calibration reproduces."""

    hosts_per_leaf: int = 2
    leaves: int = 2
    spines: int = 1
    parallel_links: int = 1
    qps_per_peer: int = 2
    world: int = 0  # ranks that send (the first hosts); 0: every host

    @property
    def ranks(self) -> int:
        hosts = self.hosts_per_leaf * self.leaves
        return min(self.world, hosts) if self.world > 1 else hosts

    def key(self) -> str:
        return (
            f"{self.ranks} ranks on {self.leaves}x{self.hosts_per_leaf} hosts, {self.spines} "
            f"spines x {self.parallel_links}, {self.qps_per_peer} QPs per peer"
        )


def machine_key(
    path_mtu_bytes: int, shape: Shape | None = None, data_path: str | None = None
) -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"v{CALIBRATION_VERSION}|{cpu}|{os.cpu_count()} cores|{platform.release()}|"
        f"mtu {path_mtu_bytes}"
        + (f"|{shape.key()}" if shape is not None else "")
        + (f"|{data_path} data path" if data_path is not None else "")
    )


def cache_path() -> Path:
    base = os.environ.get(CACHE_ENV)
    folder = Path(base) if base else Path.home() / ".cache" / "chakra-emulator"
    return folder / CACHE_FILE


def load_cached(
    path_mtu_bytes: int,
    path: Path | None = None,
    shape: Shape | None = None,
    data_path: str | None = None,
) -> Calibration | None:
    path = path or cache_path()
    try:
        entries = json.loads(path.read_text())
        entry = entries[machine_key(path_mtu_bytes, shape, data_path)]
        return Calibration.from_json({**entry, "cached": True})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(calibration: Calibration, path: Path | None = None) -> None:
    path = path or cache_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        entries = json.loads(path.read_text())
        if not isinstance(entries, dict):
            entries = {}
    except (OSError, ValueError):
        entries = {}
    entries[calibration.machine] = {**calibration.to_json(), "cached": False}
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(entries, f, indent=1)
    os.replace(tmp, path)


def calibrate(
    path_mtu_bytes: int,
    shape: Shape = Shape(),
    *,
    native: OffloadChoice = "auto",
    seconds: float = 1.0,
    refresh: bool = False,
    say: Any = None,
) -> Calibration:
    """The cached calibration for this machine, shape and the data path a run with `native`
    (engine.native) takes here, or a new measurement on that path (as root)."""
    from emulator.engine.native_path import expected_path

    data_path = expected_path(native)
    if not refresh:
        cached = load_cached(path_mtu_bytes, shape=shape, data_path=data_path)
        if cached is not None:
            return cached
    if say is not None:
        say(
            f"calibrating what this machine emulates on time: paced loads through {shape.key()} "
            f"on the {data_path} data path (once per machine and shape)"
        )
    result = measure(path_mtu_bytes, shape, seconds=seconds, native=native)
    store(result)
    return result


DELIVERED_OK_RATIO = 0.95  # a point that delivers less fell behind its pacing


def measure(
    path_mtu_bytes: int,
    shape: Shape = Shape(),
    *,
    seconds: float = 1.0,
    native: OffloadChoice = "auto",
) -> Calibration:
    """The load curve: `seconds` of paced traffic at each load of LOADS_BPS (as root), on the
    data path `native` gives (engine.native); keyed by the path the workers reported."""
    from emulator.engine.coordinator import run_plan
    from emulator.engine.native_path import summarize
    from emulator.engine.params import EngineParams
    from emulator.engine.plan import EngineFlow, RankEndpoint
    from emulator.transport.params import TransportParams
    from fabrics.registry import bring_up_fabric
    from fabrics.spec import ClosSpec

    if os.geteuid() != 0:
        raise EnvironmentProblem("calibrating the time dilation needs root (network namespaces)")
    spec = ClosSpec(
        hosts_per_leaf=shape.hosts_per_leaf,
        leaves=shape.leaves,
        spines=shape.spines,
        host_link_gbps=LINK_GBPS,
        fabric_link_gbps=LINK_GBPS,
        parallel_links=shape.parallel_links,
        marker="none",
    )
    transport = TransportParams(path_mtu_bytes=path_mtu_bytes, retransmit_timeout_s=0.05)
    n, qps = shape.ranks, shape.qps_per_peer
    pairs = [(src, dst) for src in range(n) for dst in range(n) if src != dst]
    points: list[LoadPoint] = []
    paths: list[dict[str, Any]] = []
    engine = EngineParams(native=native)
    started = time.perf_counter()
    with bring_up_fabric(spec, time_dilation=1.0, prefix="emucal-") as live:
        for offered in LOADS_BPS:
            nic_bps = offered / n
            ranks = [
                RankEndpoint(r, live.rank_address(r), live.rank_netns(r), nic_bps) for r in range(n)
            ]
            # each NIC at its line rate, spread over every peer: no receiver is oversubscribed
            size = max(1 << 14, int(nic_bps / 8 * seconds / ((n - 1) * qps)))
            flows = [
                EngineFlow(i * qps + q, src, dst, q, 49152 + (i * qps + q) % 16000, size)
                for i, (src, dst) in enumerate(pairs)
                for q in range(qps)
            ]
            outcome = run_plan(ranks, flows, transport=transport, engine=engine)
            paths.append(outcome.metadata.get("data_path") or {})
            start = min(ev.time_s for ev in outcome.started.values())
            end = max(ev.time_s for ev in outcome.finished.values())
            delivered = sum(outcome.received_bytes.values()) * 8 / max(end - start, 1e-6)
            lateness = [w for w in outcome.metadata.get("worker_tick_lateness", []) if w]
            point = LoadPoint(
                offered_bps=offered,
                delivered_bps=min(delivered, offered * 1.5),
                tick_late_p99_s=max((w["p99_s"] for w in lateness), default=0.0),
                tick_late_max_s=max((w["max_s"] for w in lateness), default=0.0),
                worker_busy_max=max(outcome.metadata.get("worker_busy_ratio") or [0.0]),
            )
            points.append(point)
            if point.delivered_ratio < STOP_RATIO:
                break
    on_pace = [p.delivered_bps for p in points if p.delivered_ratio >= DELIVERED_OK_RATIO]
    data_path = summarize(paths)["path"]
    return Calibration(
        capacity_bps=max(on_pace, default=0.0),
        flows=len(pairs) * qps,
        path_mtu_bytes=path_mtu_bytes,
        measured_s=round(time.perf_counter() - started, 3),
        machine=machine_key(path_mtu_bytes, shape, data_path),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        points=tuple(points),
        data_path=data_path,
    )
