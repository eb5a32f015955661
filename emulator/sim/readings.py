"""Every port's counters at one instant, as columns, for the simulated backend's samples.

The C fabric's ports and PFC accounts are arrays of structs (simfab_api.h fab_port_t,
fab_ingress_t): numpy reads a column of them at once through a structured view of that memory,
where the Python fabric's ports (or a mix) are read one attribute at a time. An 8:1 incast
samples its 20 ports every 100 us of simulated time: eight columns of 20 property reads per
sample were a twentieth of its replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from emulator.sim.native import NativeIngress, NativePort


class PortColumns(NamedTuple):
    """Aligned with the ports read: cumulative counters (int64) but queued_bytes (now) and
    rate_bps and paused_s (float64, the time paused up to the reading)."""

    tx_bytes: np.ndarray
    tx_frames: np.ndarray
    marks: np.ndarray
    drops: np.ndarray  # the port's, and the headroom drops of the ingress account at its far end
    queued_bytes: np.ndarray
    rate_bps: np.ndarray
    paused_s: np.ndarray
    pause_frames: np.ndarray


class PortReader:
    """Reads `sampled`: (port, the ingress account at its far end or None) pairs, in order;
    from the C fabric's arrays when every one is the C fabric's (and `vectorized`)."""

    def __init__(self, sampled: Sequence[tuple[Any, Any]], *, vectorized: bool = True) -> None:
        self._sampled = list(sampled)
        self._native: _NativeColumns | None = None  # None: attribute by attribute
        ports = [p for p, _ in self._sampled]
        ingresses = [i for _, i in self._sampled if i is not None]
        if (
            vectorized
            and ports
            and all(isinstance(p, NativePort) for p in ports)
            and all(isinstance(i, NativeIngress) for i in ingresses)
        ):
            self._native = _NativeColumns(self._sampled)

    def read(self, now_s: float) -> PortColumns:
        if self._native is not None:
            return self._native.read(now_s)
        sampled, n = self._sampled, len(self._sampled)
        return PortColumns(
            np.fromiter((p.tx_bytes for p, _ in sampled), np.int64, n),
            np.fromiter((p.tx_frames for p, _ in sampled), np.int64, n),
            np.fromiter((p.marks for p, _ in sampled), np.int64, n),
            np.fromiter((p.drops + (i.drops if i else 0) for p, i in sampled), np.int64, n),
            np.fromiter((p.queued_bytes for p, _ in sampled), np.int64, n),
            np.fromiter((p.rate_bps for p, _ in sampled), np.float64, n),
            np.fromiter((p.paused_s_until(now_s) for p, _ in sampled), np.float64, n),
            np.fromiter((p.pause_frames for p, _ in sampled), np.int64, n),
        )


_NUMPY_OF_C = {
    "int32_t": np.int32,
    "int64_t": np.int64,
    "uint32_t": np.uint32,
    "uint64_t": np.uint64,
    "double": np.float64,
}


def struct_view(ffi: Any, array: Any, ctype: str, count: int) -> np.ndarray:
    """The C array `array` of `count` structs `ctype` (plain numeric fields) as a numpy
    structured array over the same memory: it reads what C writes there, without copying."""
    fields = ffi.typeof(ctype).fields
    dtype = np.dtype(
        {
            "names": [name for name, _ in fields],
            "formats": [_NUMPY_OF_C[f.type.cname] for _, f in fields],
            "offsets": [f.offset for _, f in fields],
            "itemsize": ffi.sizeof(ctype),
        }
    )
    return np.frombuffer(ffi.buffer(array, count * ffi.sizeof(ctype)), dtype=dtype)


class _NativeColumns:
    """PortReader over the C fabric's port and ingress arrays."""

    def __init__(self, sampled: Sequence[tuple[Any, Any]]) -> None:
        sim = sampled[0][0].sim
        fab = sim.fab
        # the views keep the simulator (whose fab_free releases the memory) alive with them
        self._sim = sim
        self._ports = struct_view(sim.ffi, fab.ports, "fab_port_t", int(fab.n_ports))
        self._ingress = struct_view(sim.ffi, fab.ingress, "fab_ingress_t", int(fab.n_ingress))
        self._at = np.array([p.index for p, _ in sampled], dtype=np.intp)
        far = [i for _, i in sampled]
        self._with_far = np.array([k for k, i in enumerate(far) if i is not None], dtype=np.intp)
        self._far = np.array([i.index for i in far if i is not None], dtype=np.intp)

    def read(self, now_s: float) -> PortColumns:
        p = self._ports[self._at]  # a copy: the reading of this instant

        def column(name: str) -> np.ndarray:
            # its own array: a field of `p` is a strided view that would hold every field of
            # every port for as long as the recorder keeps the sample (the whole run)
            return np.ascontiguousarray(p[name])

        drops = column("drops")
        if len(self._far):
            drops[self._with_far] += self._ingress["drops"][self._far]
        paused = p["paused_s"] + np.where(p["paused"] != 0, now_s - p["paused_since"], 0.0)
        return PortColumns(
            column("tx_bytes"),
            column("tx_frames"),
            column("marks"),
            drops,
            column("queued_bytes"),
            column("rate_bps"),
            paused,
            column("pause_frames"),
        )
