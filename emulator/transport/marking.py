"""The switch's ECN marking decision (DCQCN congestion point, RED-style on the instantaneous queue).

Probability 0 at or below Kmin, rising linearly to Pmax at Kmax, 1 above Kmax (Zhu et al.,
SIGCOMM 2015, section 3). The random source is injected so a simulation is reproducible.
"""

from __future__ import annotations

import random

from emulator.transport.params import EcnMarkingParams


class EcnMarker:
    def __init__(self, params: EcnMarkingParams, rng: random.Random) -> None:
        self.params = params
        self._rng = rng
        self._kmin = params.kmin_bytes
        self._kmax = params.kmax_bytes
        self._pmax = params.pmax
        self._span = max(params.kmax_bytes - params.kmin_bytes, 1)

    def probability(self, queue_bytes: int) -> float:
        if queue_bytes <= self._kmin:
            return 0.0
        if queue_bytes > self._kmax:
            return 1.0
        return self._pmax * (queue_bytes - self._kmin) / self._span

    def should_mark(self, queue_bytes: int) -> bool:
        """Decide for one ECN-capable packet that finds `queue_bytes` queued ahead of it."""
        if queue_bytes <= self._kmin:
            return False
        if queue_bytes > self._kmax:
            return True
        return self._rng.random() < self._pmax * (queue_bytes - self._kmin) / self._span
