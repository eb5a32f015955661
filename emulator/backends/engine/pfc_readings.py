"""The PFC frames each rank's NIC received during a run, from its interface's counters."""

from __future__ import annotations

from typing import Any

from fabrics.dut import LiveDut
from fabrics.pfc_counters import rx_pfc_frames


class PfcReadings:
    """Received-PFC counters of every rank's NIC, read before and after the run (the difference
    is the run's); None where the interface counts none (veth: the emulated fabric or a software
    DUT). Ranks sharing an interface share its reading."""

    def __init__(self, live: Any) -> None:
        self.live = live
        self.dut = isinstance(live, LiveDut)
        self.before = self._read()

    def _read(self) -> dict[int, int | None]:
        ranks = range(self.live.ranks)
        if not self.dut:  # veth ports of the emulated fabric count no PFC
            return dict.fromkeys(ranks)
        spec = self.live.spec
        by_port: dict[tuple[str, str | None], int | None] = {}
        out = {}
        for r in ranks:
            port = (spec.rank_interface(r), self.live.rank_netns(r))
            if port not in by_port:
                by_port[port] = rx_pfc_frames(*port)
            out[r] = by_port[port]
        return out

    def received(self) -> dict[int, int | None]:
        after = self._read()
        out: dict[int, int | None] = {}
        for r, a in after.items():
            b = self.before.get(r)
            out[r] = None if a is None or b is None else max(0, a - b)
        return out
