"""What this machine can emulate on time: a load curve, its points and its cache.

The curve is measured by the engine-backed backends (emulator/backends/engine/load_curve.py, with
the run's own code: the scenario's Clos shape with links far faster than the machine, every rank
paced at its NIC's line rate over all its peers on `qps_per_peer` queue pairs, DCQCN on) at
growing offered loads until the engine no longer delivers what it offers. Each point records what
the fidelity verdict judges (emulator.timescale.verdict): the share of the offered load delivered
(the pacing deficit), the p99 and maximum lateness of the workers' ticks, and the busiest worker's
CPU share. emulator.timescale.tdf turns the curve into the lowest TDF at which a scenario's peak
load (every NIC at line rate) lands on a point where those checks hold once lateness is divided by
that TDF.

It is cached per machine (CPU model, core count, kernel release), shape, path MTU and data path
(native C or Python: they carry different loads per core), in $CHAKRA_EMULATOR_CACHE_DIR or
~/.cache/chakra-emulator, because it takes several seconds and the machine does not change between
runs; `emulate run --recalibrate` measures again.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CACHE_ENV = "CHAKRA_EMULATOR_CACHE_DIR"
CACHE_FILE = "calibration.json"
CALIBRATION_VERSION = 8  # 3: keyed by the data path (native or Python); 4: the NIC quantum;
# 5: the flows' engine delay counts the reads' wait in the sockets (factors verified without it
# held runs that read up to 25% slow); 6: the probes judge the engine's delay at half the limit;
# 7: the receive queue pairs' common path in C (engine.native_drain): a factor found before it
# is higher than needed; 8: the NIC arbiter's turns only for queue pairs with a packet due (a
# quarter less of the workers' CPU on the main job)
DELIVERED_OK_RATIO = 0.95  # a point that delivers less fell behind its pacing


@dataclass(frozen=True)
class LoadPoint:
    """One measured load: offered and delivered aggregate payload bits per wall second, the
    workers' worst tick lateness (p99 and max over workers, wall seconds), the busiest one's CPU
    share and their CPU shares summed (cores busy)."""

    offered_bps: float
    delivered_bps: float
    tick_late_p99_s: float
    tick_late_max_s: float
    worker_busy_max: float
    workers_busy_total: float = 0.0

    @property
    def cores_per_gbps(self) -> float:
        """Worker cores busy per delivered Gb/s (0 when nothing was delivered)."""
        gbps = self.delivered_bps / 1e9
        return self.workers_busy_total / gbps if gbps > 0 else 0.0

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
    nic_quantum_bytes: int = 32768  # the run's engine.nic_quantum_bytes (the NIC arbiter's turn)

    @property
    def ranks(self) -> int:
        hosts = self.hosts_per_leaf * self.leaves
        return min(self.world, hosts) if self.world > 1 else hosts

    def key(self) -> str:
        return (
            f"{self.ranks} ranks on {self.leaves}x{self.hosts_per_leaf} hosts, {self.spines} "
            f"spines x {self.parallel_links}, {self.qps_per_peer} QPs per peer, NIC quantum "
            f"{self.nic_quantum_bytes} B"
        )


DEFAULT_SHAPE = Shape()


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
