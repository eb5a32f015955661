"""What this machine carries through an emulated fabric, measured once and cached.

The measurement uses the same code as a run: a small Clos of namespaces (2 leaves, 1 spine,
2 hosts per leaf, so every packet crosses leaf, spine and leaf as in the scenarios' fabrics) with
its links far faster than the machine, and the engine sending flat out (congestion control off)
from every host to a host under the other leaf. Delivered payload bits per wall second is the
capacity. A probe sizes the measured run to about `seconds`.

The result is cached per machine (CPU model, core count, kernel release) and path MTU, in
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

from emulator.errors import EnvironmentProblem

CACHE_ENV = "CHAKRA_EMULATOR_CACHE_DIR"
CACHE_FILE = "calibration.json"
CALIBRATION_VERSION = 1
LINK_GBPS = 1000.0  # far above what the machine carries: the links never limit the measurement
PROBE_BYTES = 8 << 20


@dataclass(frozen=True)
class Calibration:
    capacity_bps: float  # payload bits per wall second through leaf-spine-leaf paths
    flows: int
    path_mtu_bytes: int
    measured_s: float
    machine: str
    measured_at: str
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def machine_key(path_mtu_bytes: int) -> str:
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
    )


def cache_path() -> Path:
    base = os.environ.get(CACHE_ENV)
    folder = Path(base) if base else Path.home() / ".cache" / "chakra-emulator"
    return folder / CACHE_FILE


def load_cached(path_mtu_bytes: int, path: Path | None = None) -> Calibration | None:
    path = path or cache_path()
    try:
        entries = json.loads(path.read_text())
        entry = entries[machine_key(path_mtu_bytes)]
        return Calibration(**{**entry, "cached": True})
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
    path_mtu_bytes: int, *, seconds: float = 2.0, refresh: bool = False, say: Any = None
) -> Calibration:
    """The cached calibration for this machine, or a new measurement (as root)."""
    if not refresh:
        cached = load_cached(path_mtu_bytes)
        if cached is not None:
            return cached
    if say is not None:
        say(f"calibrating what this machine carries through a fabric (about {seconds:g} s)")
    result = measure(path_mtu_bytes, seconds=seconds)
    store(result)
    return result


def measure(path_mtu_bytes: int, *, seconds: float = 2.0) -> Calibration:
    from emulator.engine.coordinator import run_plan
    from emulator.engine.params import EngineParams
    from emulator.engine.plan import EngineFlow, RankEndpoint
    from emulator.transport.params import TransportParams
    from fabrics.registry import bring_up_fabric
    from fabrics.spec import ClosSpec

    if os.geteuid() != 0:
        raise EnvironmentProblem("calibrating the time dilation needs root (network namespaces)")
    spec = ClosSpec(
        hosts_per_leaf=2,
        leaves=2,
        spines=1,
        host_link_gbps=LINK_GBPS,
        fabric_link_gbps=LINK_GBPS,
        parallel_links=2,
        marker="none",
    )
    transport = TransportParams(
        congestion_control="none",
        path_mtu_bytes=path_mtu_bytes,
        retransmit_timeout_s=0.05,
    )
    with bring_up_fabric(spec, time_dilation=1.0, prefix="emucal-") as live:
        ranks = [
            RankEndpoint(r, live.rank_address(r), live.rank_netns(r), LINK_GBPS * 1e9)
            for r in range(live.ranks)
        ]
        # hosts 0,1 under leaf 0 and 2,3 under leaf 1: every flow crosses the spine
        pairs = [(0, 2), (1, 3), (2, 0), (3, 1)]

        def run(size: int) -> tuple[float, int]:
            flows = [
                EngineFlow(i, src, dst, 0, 49152 + i, size) for i, (src, dst) in enumerate(pairs)
            ]
            outcome = run_plan(ranks, flows, transport=transport, engine=EngineParams())
            start = min(ev.time_s for ev in outcome.started.values())
            end = max(ev.time_s for ev in outcome.finished.values())
            return max(end - start, 1e-6), sum(outcome.received_bytes.values())

        probe_s, probe_bytes = run(PROBE_BYTES)
        rate = probe_bytes / probe_s
        size = max(PROBE_BYTES, int(rate * seconds / len(pairs)))
        wall_s, delivered = run(size)
    return Calibration(
        capacity_bps=delivered * 8 / wall_s,
        flows=len(pairs),
        path_mtu_bytes=path_mtu_bytes,
        measured_s=round(wall_s, 3),
        machine=machine_key(path_mtu_bytes),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
