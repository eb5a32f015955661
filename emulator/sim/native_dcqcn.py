"""A send queue pair's DCQCN reaction point in the C fabric (emulator/native/simfab_dcqcn.c):
`NativeReactionPoint` takes the Python one's place (emulator/transport/dcqcn.py ReactionPoint)
in its queue pair's controller, over the C state its slot holds, so that the fabric's timers in
C and the Python transport's CNPs, timers and sends act on one state. `load` writes the Python
reaction point's parameters and state into a C fab_rp_t: the parameters as the doubles the
Python one computes from DcqcnParams, so both do the same arithmetic on the same numbers
(tests/unit/test_native_dcqcn.py)."""

from __future__ import annotations

from typing import Any

from emulator.transport.dcqcn import RP_INCREASE_REASONS, ReactionPoint
from emulator.transport.dcqcn_params import ALPHA_SCALE

# ReactionPoint.last_reason by simfab_api.h's RP_* code
REASONS = ("", "first_cnp", "cnp", *RP_INCREASE_REASONS)
REASON_CODE = {name: code for code, name in enumerate(REASONS)}


def load(rp: ReactionPoint, c: Any) -> None:
    """The C reaction point `c` becomes `rp`, parameters and state."""
    p = rp.params
    c.g = rp._g
    c.alpha_period_s = rp._alpha_period_s
    c.decrease_period_s = rp._decrease_period_s
    c.time_reset_s = p.rpg_time_reset_us * 1e-6  # as on_timer and _decrease compute it
    c.hai_bps = p.rpg_hai_rate_mbps * 1e6  # as _increase does
    c.ai_bps = p.rpg_ai_rate_mbps * 1e6
    c.min_dec_fac = p.rpg_min_dec_fac
    c.min_rate_bps = rp._min_rate_bps
    first = rp._first_cnp_rate_bps
    c.has_first_cnp_rate = first is not None
    c.first_cnp_rate_bps = first if first is not None else 0.0
    c.initial_alpha = p.initial_alpha_value / ALPHA_SCALE  # as on_cnp does
    c.line_rate_bps = rp.line_rate_bps
    c.byte_reset_bytes = p.rpg_byte_reset_bytes
    c.threshold = p.rpg_threshold
    c.clamp_tgt_rate = bool(p.clamp_tgt_rate)
    c.clamp_after_time_inc = bool(p.clamp_tgt_rate_after_time_inc)
    load_state(rp, c)


def load_state(rp: ReactionPoint, c: Any) -> None:
    """`rp`'s state alone into `c` (its parameters there already)."""
    c.active = rp.active
    c.last_reason = REASON_CODE[rp.last_reason]
    c.cnp_in_period = rp._cnp_in_period
    c.increased_since_cut = rp._increased_since_cut
    c.counting = rp._counting
    c.current_rate_bps = rp.current_rate_bps
    c.target_rate_bps = rp.target_rate_bps
    c.alpha = rp.alpha
    c.alpha_epoch_s = rp._alpha_epoch_s
    c.decrease_epoch_s = rp._decrease_epoch_s
    c.decrease_due_s = rp._decrease_due_s
    c.next_increase_s = rp._next_increase_s
    c.timer_events = rp._timer_events
    c.byte_events = rp._byte_events
    c.bytes_since_reset = rp._bytes_since_reset


class NativeReactionPoint:
    """ReactionPoint's interface (what congestion.DcqcnControl uses) over a C fab_rp_t: the
    queue pair's only reaction point once its send queue pair's slot in the C fabric holds it,
    so that the C fabric's timers (simfab_sqp.c sqp_timer) and Python's CNPs, timers and sends
    act on the same state without copies. `keep`: what owns the memory (the fabric)."""

    __slots__ = ("_c", "_keep", "_lib", "_out", "line_rate_bps", "params")

    def __init__(self, rp: ReactionPoint, ffi: Any, lib: Any, c: Any, keep: Any) -> None:
        load(rp, c)
        self._c, self._lib, self._keep = c, lib, keep
        self._out = (ffi.new("double *"), ffi.new("double *"), ffi.new("int64_t *"))
        self.params = rp.params
        self.line_rate_bps = rp.line_rate_bps

    @property
    def current_rate_bps(self) -> float:
        return float(self._c.current_rate_bps)

    @property
    def target_rate_bps(self) -> float:
        return float(self._c.target_rate_bps)

    @property
    def active(self) -> bool:
        return bool(self._c.active)

    @property
    def last_reason(self) -> str:
        return REASONS[self._c.last_reason]

    @property
    def alpha(self) -> float:
        return float(self._c.alpha)

    def alpha_at(self, *, now: float) -> float:
        return float(self._lib.rp_alpha_at(self._c, now))

    def on_cnp(self, *, now: float) -> bool:
        return bool(self._lib.rp_on_cnp(self._c, now))

    def on_timer(self, *, now: float) -> bool:
        return bool(self._lib.rp_on_timer(self._c, now))

    def on_bytes_sent(self, *, now: float, size_bytes: int) -> bool:
        return bool(self._lib.rp_on_bytes_sent(self._c, now, size_bytes))

    def next_deadline_s(self) -> float | None:
        c = self._c
        return float(self._lib.rp_next_deadline(c)) if c.active else None

    def quiet(self) -> tuple[float, float, int]:
        deadline, slack, budget = self._out
        self._lib.rp_quiet(self._c, deadline, slack, budget)
        return float(deadline[0]), float(slack[0]), int(budget[0])

    def count_quiet_bytes(self, size_bytes: int) -> None:
        self._lib.rp_count_quiet_bytes(self._c, size_bytes)
