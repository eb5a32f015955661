"""Which data path a worker runs: the native burst path (emulator.native, C) or the pure-Python one.

`engine.native` (EngineParams): auto takes the native path when its module is built, current and
passes the self-check (the check bursts, reads and ACKs byte for byte as the Python code lays
them out and reads them); otherwise the worker runs the Python path, which stays complete. on refuses to start without it (one line saying
what is missing); off is the Python path. Either way the worker reports which path it took and
why, and the coordinator puts it in the run's metadata (summary.json engine.data_path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.engine.params import OffloadChoice
from emulator.errors import EnvironmentProblem
from emulator.native import load
from emulator.native.acks import NativeReplies
from emulator.native.burst import NativeBursts
from emulator.native.reads import NativeRunReader
from emulator.native.selfcheck import self_check
from emulator.transport.burst_wire import BurstBuffer

NATIVE = "native"
PYTHON = "python"
# GSO buffers a queue pair alone in its NIC's round takes per poll on the native path, sent in
# one sendmmsg (emulator/engine/send_path.py): the Python work per buffer divided by as many.
# Measured here, one flat-out QP over a veth pair, packets/s at 4096 / 1024 B, two runs each:
# 1 buffer per poll 363k-417k / 618k-926k, 4: 505k-518k / 986k-1020k, 8: 544k-578k /
# 1104k-1109k. 8 x 64 KB leave in about 0.2 ms, well within a 1 ms tick.
NATIVE_BUFFERS_PER_POLL = 8


@dataclass(frozen=True)
class DataPath:
    """The path a worker chose: `bursts` (its data sends), `reader` (its GRO reads) and
    `replies` (its ACK sends) are None on the Python path; `reason` says why."""

    bursts: NativeBursts | None
    reader: NativeRunReader | None
    replies: NativeReplies | None
    reason: str

    @property
    def name(self) -> str:
        return NATIVE if self.bursts is not None else PYTHON

    def to_json(self) -> dict[str, Any]:
        return {"path": self.name, "reason": self.reason}


def choose_data_path(
    choice: OffloadChoice,
    send_buffer: BurstBuffer,
    receive_buffer: bytearray,
    reply_buffer: bytearray,
    max_segments: int,
) -> DataPath:
    """The native path for bursts laid out in `send_buffer`, reads into `receive_buffer` and
    ACKs laid out in `reply_buffer`, if `choice` allows and it works here."""
    if choice == "off":
        return DataPath(None, None, None, "engine.native: off")
    module, why = load("burst")
    if module is not None:
        failed = self_check(module, max_segments)
        if not failed:
            return DataPath(
                NativeBursts(module, send_buffer),
                NativeRunReader(module, receive_buffer),
                NativeReplies(module, reply_buffer),
                "C burst layout, GSO sends, reads and ACKs; self-checked",
            )
        why = f"emulator.native._burst failed its self-check: {failed}"
    if choice == "on":
        raise EnvironmentProblem(f"engine.native: on, but {why}")
    return DataPath(None, None, None, why)


def expected_path(choice: OffloadChoice, max_segments: int = 64) -> str:
    """The path a worker with `choice` takes on this machine (the same load and self-check, run
    here), for what must match the run's path: the auto TDF's calibration and its cache."""
    if choice == "off":
        return PYTHON
    module, why = load("burst")
    if module is not None:
        failed = self_check(module, max_segments)
        if not failed:
            return NATIVE
        why = f"emulator.native._burst failed its self-check: {failed}"
    if choice == "on":
        raise EnvironmentProblem(f"engine.native: on, but {why}")
    return PYTHON


def summarize(paths: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's data path from its workers' reports (empty: not reported yet): native, python
    or mixed (some workers each), and why; unknown before any worker reported."""
    known = [p for p in paths if p.get("path")]
    if not known:
        return {"path": "unknown", "reason": "no worker reported its data path"}
    names = sorted({p["path"] for p in known})
    reasons = sorted({p.get("reason", "") for p in known} - {""})
    return {"path": names[0] if len(names) == 1 else "mixed", "reason": "; ".join(reasons)}
