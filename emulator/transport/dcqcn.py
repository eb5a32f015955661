"""DCQCN (Zhu et al., SIGCOMM 2015) as NVIDIA NICs implement it: reaction point and notification point.

Reaction point (sender, one per QP), inactive at line rate until the first CNP. The rules, each
as the public references state them:
- first CNP: the NIC allocates a rate limiter at `rate_to_set_on_first_cnp` (current and target;
  0 keeps line rate), alpha starts at `initial_alpha_value`, and the alpha and rate-decrease
  timers start (NVIDIA DOCA "DCQCN CC Parameters"; HPCC ns-3 rdma-hw.cc `cnp_received_mlx`).
- alpha is updated every dce_tcp_rtt: alpha = (1-g) alpha + g if a CNP arrived in the period,
  else (1-g) alpha, with g = (1024 - dce_tcp_g)/1024 (NVIDIA DOCA; ns-3 `UpdateAlphaMlx`). The
  first CNP only starts the timer (ns-3 clears `m_alpha_cnp_arrived` there). Between CNPs nothing
  but time changes alpha, so periods are applied when alpha is needed instead of on a 1 us timer;
  period boundaries stay at first_cnp + k * dce_tcp_rtt.
- rate decrease is checked every rate_reduce_monitor_period from the first CNP: "rate reduction
  will occur only if a CNP is received during the relevant time interval" (NVIDIA DOCA). A CNP
  is remembered and the cut happens at the end of the period it arrived in (ns-3
  `CheckRateDecreaseMlx` at first_cnp + k * period, after that instant's alpha update): target =
  current (only after an increase event since the last cut, unless clamp_tgt_rate; timer
  increases count when clamp_tgt_rate_after_time_inc), current = current (1 - alpha/2) (not
  below rpg_min_dec_fac % of itself nor rpg_min_rate), and the increase timer, byte counter and
  their event counts restart. Several CNPs in one period make one cut, none is lost.
- increase events come from a timer (every rpg_time_reset) and a byte counter (every
  rpg_byte_reset bytes sent), both started by a cut (ns-3 starts `m_rpTimer` in
  `CheckRateDecreaseMlx`), so nothing raises the rate between the first CNP and the first cut. After counting the event (T timer events, BC byte events since the
  last decrease, F = rpg_threshold): max(T, BC) <= F fast recovery (current = (target+current)/2);
  min(T, BC) > F hyper increase (target += rpg_hai_rate); otherwise additive increase
  (target += rpg_ai_rate); both then set current = (target+current)/2. Rates are capped at line
  rate; within rpg_min_rate of line rate the QP returns to inactive.
Notification point (receiver, one per QP): a CNP for a CE-marked packet, at most one per
min_time_between_cnps.
All methods take keyword-only `now` (seconds) and return what changed; deadlines are returned by
`next_deadline_s`, never scheduled.
"""

from __future__ import annotations

import math

from emulator.transport.dcqcn_params import ALPHA_SCALE, DcqcnParams

_EPS = 1e-9  # float slack when counting whole periods
NO_BYTE_BUDGET = 1 << 62  # quiet(): the byte counter is not counting
_TIMER_SLACK_S = _EPS * 1e-3  # a deadline this close to `now` is due (on_timer, quiet)

RP_INCREASE_REASONS = ("fast_recovery", "additive_increase", "hyper_increase")


class ReactionPoint:
    """Per-QP DCQCN rate state of a sender."""

    def __init__(self, params: DcqcnParams, *, line_rate_bps: float) -> None:
        self.params = params
        self.line_rate_bps = float(line_rate_bps)
        self.current_rate_bps = self.line_rate_bps
        self.target_rate_bps = self.line_rate_bps
        self.alpha = params.initial_alpha_value / ALPHA_SCALE
        self.active = False
        self.last_reason = ""
        self._g = params.g
        self._alpha_period_s = params.dce_tcp_rtt_us * 1e-6
        self._alpha_epoch_s = 0.0
        self._cnp_in_period = False
        self._decrease_period_s = params.rate_reduce_monitor_period_us * 1e-6
        self._decrease_epoch_s = 0.0
        self._decrease_due_s = math.inf  # the check that cuts for a remembered CNP
        self._timer_events = 0
        self._byte_events = 0
        self._bytes_since_reset = 0
        self._next_increase_s = math.inf
        self._increased_since_cut = False
        self._counting = False  # byte counter and increase timer run from the first cut on
        self._min_rate_bps = params.rpg_min_rate_mbps * 1e6
        first = params.rate_to_set_on_first_cnp_mbps * 1e6
        self._first_cnp_rate_bps = min(first, self.line_rate_bps) if first > 0 else None

    # -- alpha ---------------------------------------------------------------------------
    def _advance_alpha(self, now: float) -> None:
        periods = int((now - self._alpha_epoch_s) / self._alpha_period_s + _EPS)
        if periods <= 0:
            return
        g = self._g
        alpha = self.alpha
        if self._cnp_in_period:
            alpha = (1 - g) * alpha + g
            self._cnp_in_period = False
            periods_left = periods - 1
        else:
            periods_left = periods
        if periods_left:
            alpha *= (1 - g) ** periods_left
        self.alpha = alpha
        self._alpha_epoch_s += periods * self._alpha_period_s

    def alpha_at(self, *, now: float) -> float:
        """Alpha as of `now` (applies the update periods that ended)."""
        if self.active:
            self._advance_alpha(now)
        return self.alpha

    # -- inputs --------------------------------------------------------------------------
    def on_cnp(self, *, now: float) -> bool:
        """A CNP arrived: remembered for the decrease check that ends its period. True when the
        rate changed now (only a first CNP with rate_to_set_on_first_cnp does)."""
        changed = False
        if not self.active:
            p = self.params
            self.active = True
            self.alpha = p.initial_alpha_value / ALPHA_SCALE
            self._alpha_epoch_s = now
            self._cnp_in_period = False
            self._decrease_epoch_s = now
            self._increased_since_cut = False
            self._counting = False
            self._timer_events = self._byte_events = self._bytes_since_reset = 0
            self._next_increase_s = math.inf
            if self._first_cnp_rate_bps is not None:
                self.current_rate_bps = self.target_rate_bps = self._first_cnp_rate_bps
                self.last_reason = "first_cnp"
                changed = True
        else:
            self._advance_alpha(now)
            self._cnp_in_period = True
        if self._decrease_due_s == math.inf:
            self._decrease_due_s = self._next_check_after(now)
            if self._decrease_due_s <= now:  # no monitor period: cut at once
                self._decrease(now)
                changed = True
        return changed

    def _next_check_after(self, now: float) -> float:
        """The first rate-decrease check strictly after `now` (checks run every
        rate_reduce_monitor_period from the first CNP)."""
        period = self._decrease_period_s
        if period <= 0:
            return now
        k = math.floor((now - self._decrease_epoch_s) / period + _EPS) + 1
        return self._decrease_epoch_s + k * period

    def on_bytes_sent(self, *, now: float, size_bytes: int) -> bool:
        """Count bytes for the byte-counter increase; True when the rate changed."""
        if not self.active:
            return False
        changed = self.on_timer(now=now)  # a cut or increase due first restarts the counter
        if not self._counting:
            return changed  # the increase counters start at the episode's first cut
        self._bytes_since_reset += size_bytes
        reset = self.params.rpg_byte_reset_bytes
        while self._counting and self._bytes_since_reset >= reset:
            self._bytes_since_reset -= reset
            self._byte_events += 1
            self._increased_since_cut = True
            self._increase()
            changed = True
        return changed

    def on_timer(self, *, now: float) -> bool:
        """Run the decrease checks and the increase timer up to `now`, in time order; True when
        the rate changed."""
        changed = False
        period = self.params.rpg_time_reset_us * 1e-6
        slack = _TIMER_SLACK_S
        while self.active:
            cut_s, inc_s = self._decrease_due_s, self._next_increase_s
            if cut_s <= inc_s and now + slack >= cut_s:
                self._decrease(cut_s)
            elif now + slack >= inc_s:
                self._next_increase_s += period
                self._timer_events += 1
                if self.params.clamp_tgt_rate_after_time_inc:
                    self._increased_since_cut = True
                self._increase()
            else:
                break
            changed = True
        return changed

    def next_deadline_s(self) -> float | None:
        if not self.active:
            return None
        return min(self._decrease_due_s, self._next_increase_s)

    def quiet(self) -> tuple[float, float, int]:
        """(deadline, slack, byte budget) inside which on_bytes_sent changes nothing but the
        byte count (CongestionControl.quiet): on_timer acts at now + slack >= the earlier of its
        two deadlines; the counter acts once its bytes reach rpg_byte_reset_bytes."""
        if not self.active:
            return math.inf, 0.0, NO_BYTE_BUDGET  # on_packet_sent returns at once
        deadline = min(self._decrease_due_s, self._next_increase_s)
        if not self._counting:
            return deadline, _TIMER_SLACK_S, NO_BYTE_BUDGET
        return deadline, _TIMER_SLACK_S, self.params.rpg_byte_reset_bytes - self._bytes_since_reset

    def count_quiet_bytes(self, size_bytes: int) -> None:
        """Bytes sent inside quiet()'s bounds (on_bytes_sent's count, nothing else)."""
        if self.active and self._counting:
            self._bytes_since_reset += size_bytes

    # -- decrease and increase -----------------------------------------------------------
    def _decrease(self, at_s: float) -> None:
        p = self.params
        self._advance_alpha(at_s)
        current = self.current_rate_bps
        if p.clamp_tgt_rate or self._increased_since_cut:
            self.target_rate_bps = current
        self._increased_since_cut = False
        floor = max(current * p.rpg_min_dec_fac / 100.0, self._min_rate_bps)
        self.current_rate_bps = max(current * (1 - self.alpha / 2), floor)
        self._decrease_due_s = math.inf
        self._timer_events = 0
        self._byte_events = 0
        self._bytes_since_reset = 0
        self._next_increase_s = at_s + p.rpg_time_reset_us * 1e-6
        self._counting = True
        self.last_reason = "cnp"

    def _increase(self) -> None:
        p = self.params
        t, bc, f = self._timer_events, self._byte_events, p.rpg_threshold
        if max(t, bc) <= f:
            self.last_reason = "fast_recovery"
        elif min(t, bc) > f:
            self.target_rate_bps += p.rpg_hai_rate_mbps * 1e6
            self.last_reason = "hyper_increase"
        else:
            self.target_rate_bps += p.rpg_ai_rate_mbps * 1e6
            self.last_reason = "additive_increase"
        line = self.line_rate_bps
        self.target_rate_bps = min(self.target_rate_bps, line)
        self.current_rate_bps = min((self.target_rate_bps + self.current_rate_bps) / 2, line)
        if line - self.current_rate_bps < max(self._min_rate_bps, 1.0):
            # Back at line rate: the NIC releases the rate limiter.
            self.current_rate_bps = self.target_rate_bps = line
            self.active = False
            self._counting = False
            self._next_increase_s = math.inf
            self._decrease_due_s = math.inf


class NotificationPoint:
    """Per-QP CNP pacing of a receiver. `last_cnp_s` is its whole state: another
    implementation of on_ce (the simulator's C fabric, emulator/native/simfab_rqp.c) reads and
    writes it."""

    def __init__(self, params: DcqcnParams) -> None:
        self.interval_s = params.min_time_between_cnps_us * 1e-6
        self.last_cnp_s = -math.inf

    def on_ce(self, *, now: float) -> bool:
        """A CE-marked packet arrived; True when a CNP must be sent now."""
        if now - self.last_cnp_s + 1e-12 < self.interval_s:
            return False
        self.last_cnp_s = now
        return True
