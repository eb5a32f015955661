"""The fluid fabric: queue pairs as rates under DCQCN, switch ports as fluid queues, in steps.

What it computes, per step of `dt` (the reaction point's rate-decrease period, 4 us by default,
so one step is one decrease check), vectorized over the live queue pairs (those with bytes to
send and those whose reaction point still recovers; the others change nothing) and every
directed link:

- each active queue pair sends at its DCQCN current rate, its NIC's line rate shared max-min
  fair among the NIC's queue pairs (the NIC arbiter);
- a link's arrivals are the rates of the queue pairs crossing it, each limited by the links it
  crossed before (their last step's share, a step's lag); above the link's rate the excess
  queues, below it the queue drains (a fluid queue: Zhu et al., "ECN or Delay: Lessons Learnt
  from Analysis of DCQCN and TIMELY", CoNEXT 2016, section 3); what leaves a queue is its
  arrivals' share (a FIFO serves them in proportion), while a source sends at its rate (at most
  its backlog) and what it sends above its share waits in the queue;
- a switch port marks with the DCQCN law on its queue (emulator.transport.marking: 0 up to Kmin,
  linear to Pmax at Kmax, 1 above), a queue pair's packets are marked with the path's combined
  probability, and its notification point sends a CNP in a step if at least one of the step's
  packets was marked (at most one CNP per min_time_between_cnps, which the step is; the packets
  paced, so a queue pair below a packet a step has one in that fraction of steps): a seeded
  draw per queue pair and step, so CNPs arrive as discrete events, as in the packet simulator;
- the reaction point applies NVIDIA's rules (emulator.transport.dcqcn, the same parameters):
  the first CNP starts it (alpha at its initial value), a CNP in a step cuts the rate at the
  step's end (target = current, current x (1 - alpha/2), not below rpg_min_dec_fac % nor
  rpg_min_rate), alpha decays by (1-g) per alpha period and gains g in a period with a CNP,
  increase events from the timer (rpg_time_reset) and the byte counter (rpg_byte_reset) since
  the last cut raise it by fast recovery, additive and hyper increase;
- PFC as a rate cap: a port whose queue reaches its XOFF threshold holds it there (its
  upstream is paused: what would overflow waits at the senders, who then move at the port's
  rate share), counting the time as the packet simulator counts pauses.

What it leaves out, said in every run's summary (fidelity.leaves_out): packets (no per-packet
tail: a queue is an average over a step), reordering, go-back-N and drops (a lossless fabric),
the feedback delay below a step, and the arbiter's exact round robin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.transport.dcqcn_params import ALPHA_SCALE, DcqcnParams

NO_LINK = -1  # padding in a path
# what a queue pair's reaction point keeps and changes (FluidFabric's per-queue-pair arrays;
# its line rate it only reads)
REACTION_STATE = (
    "rc",
    "rt",
    "alpha",
    "rp_on",
    "inc_since",
    "timer_s",
    "bytes_since",
    "t_events",
    "b_events",
)


@dataclass(frozen=True)
class FluidLinks:
    """Every directed link's constants (index = link number)."""

    capacity_bps: np.ndarray
    kmin_bytes: np.ndarray  # inf: the port does not mark
    kmax_bytes: np.ndarray
    pmax: np.ndarray
    xoff_bytes: np.ndarray  # inf: no PFC on the port
    buffer_bytes: np.ndarray  # the port's queue limit without PFC (inf: none)


@dataclass
class StepResult:
    """What one step moved: for the step's live queue pairs (`qps`, their indices: the active
    and the recovering ones), the bytes each delivered, the CNPs drawn and the expected CE
    packets; per link the bytes it sent and the packets it marked."""

    qps: np.ndarray
    delivered_bytes: np.ndarray
    cnps: np.ndarray
    ce_packets: np.ndarray
    link_tx_bytes: np.ndarray
    link_marks: np.ndarray


def max_min_share(demand: np.ndarray, group: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Each demand's max-min fair share of its group's capacity (water-filling, all groups at
    once): the level L of a group is where sum(min(d, L)) = capacity, infinite when the
    demands fit."""
    order = np.lexsort((demand, group))
    d, g = demand[order], group[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    sizes = np.diff(np.r_[starts, len(d)])
    first = np.repeat(starts, sizes)
    rank = np.arange(len(d)) - first  # position within the group
    before = np.cumsum(d) - d  # demands below this one, over the whole array
    before -= np.repeat(before[starts], sizes)  # ... within its group
    left = np.repeat(sizes, sizes) - rank
    level_here = (capacity[g] - before) / left  # equal split of what the smaller ones leave
    capped = d >= level_here  # the first such one (and all after it) get the level
    idx = np.where(capped, np.arange(len(d)), len(d))
    hit = np.minimum.reduceat(idx, starts)
    level = np.full(len(starts), np.inf)
    found = hit < len(d)
    level[found] = level_here[hit[found]]
    share = np.minimum(d, np.repeat(level, sizes))
    out = np.empty_like(demand)
    out[order] = share
    return out


def cnp_probability(keep: np.ndarray, packets: np.ndarray) -> np.ndarray:
    """The chance of a CNP in a step for a queue pair sending `packets` paced packets a step,
    each marked with probability 1 - `keep`, when the step is min_time_between_cnps: the long-run
    rate of emulator.transport.dcqcn.NotificationPoint (a CNP for a CE packet, none within the
    interval after one; NVIDIA's DCQCN). After a CNP the next ceil(packets) - 1 packets fall in
    the interval, then it takes 1/p packets on average to meet a marked one: r / (ceil(r) - 1 +
    1/p) a step. A queue pair at a quarter of a packet a step behind a queue above Kmax gets a
    CNP in a quarter of the steps; one at 2.5 packets a step, in 5 of 6."""
    p_mark = 1.0 - keep
    marked = (p_mark > 0) & (packets > 0)
    rate = np.zeros_like(packets)
    r, p = packets[marked], p_mark[marked]
    rate[marked] = r / (np.ceil(r) - 1.0 + 1.0 / p)
    return np.minimum(rate, 1.0)


class FluidFabric:
    """Links, queue pairs with their paths, and the DCQCN state of each; `step` advances."""

    def __init__(
        self,
        links: FluidLinks,
        dcqcn: DcqcnParams,
        *,
        mtu_bytes: int,
        dt_s: float,
        seed: int,
        max_hops: int,
    ) -> None:
        self.links = links
        self.n_links = len(links.capacity_bps)
        self.dcqcn = dcqcn
        self.mtu_bits = mtu_bytes * 8.0
        self.dt = dt_s
        self.rng = np.random.default_rng(seed)
        self.reacts = True  # congestion_control: none leaves every rate at line rate
        self.max_hops = max_hops
        self.queue_bytes = np.zeros(self.n_links)
        self.paused_s = np.zeros(self.n_links)
        self.pauses = np.zeros(self.n_links, dtype=np.int64)
        self._paused_now = np.zeros(self.n_links, dtype=bool)
        self._ratio = np.ones(self.n_links + 1)  # last step's share at each link (+ padding)
        # queue pairs (grown as they open)
        self.n = 0
        cap = 64
        self.path = np.full((cap, max_hops), NO_LINK, dtype=np.int64)
        self.line_bps = np.zeros(cap)
        self.rc = np.zeros(cap)  # current rate
        self.rt = np.zeros(cap)  # target rate
        self.alpha = np.zeros(cap)
        self.rp_on = np.zeros(cap, dtype=bool)  # DCQCN started (first CNP seen)
        self.active = np.zeros(cap, dtype=bool)  # has bytes to send
        # bytes it has left to send (inf: unbounded); a step sends at most that much, so a
        # message's end does not send past it (a step at 400 Gb/s is 200 KB)
        self.backlog = np.zeros(cap)
        self.timer_s = np.zeros(cap)  # since the last cut
        self.bytes_since = np.zeros(cap)
        self.t_events = np.zeros(cap)
        self.b_events = np.zeros(cap)
        self.inc_since = np.zeros(cap, dtype=bool)  # an increase event since the last cut
        p = dcqcn
        self._g = p.g
        self._alpha_periods = max(1, round(dt_s / (p.dce_tcp_rtt_us * 1e-6)))
        self._decay = (1.0 - self._g) ** self._alpha_periods
        self._min_dec = p.rpg_min_dec_fac / 100.0
        self._min_rate = p.rpg_min_rate_mbps * 1e6
        self._timer_s = p.rpg_time_reset_us * 1e-6
        self._byte_reset = float(p.rpg_byte_reset_bytes)
        self._threshold = p.rpg_threshold
        self._ai = p.rpg_ai_rate_mbps * 1e6
        self._hai = p.rpg_hai_rate_mbps * 1e6
        first = p.rate_to_set_on_first_cnp_mbps * 1e6
        self._first_rate = first if first > 0 else None

    # -- queue pairs ------------------------------------------------------------------------
    def add(self, path: list[int], line_rate_bps: float) -> int:
        """A queue pair over `path` (link numbers, the NIC's first); returns its index."""
        if len(path) > self.max_hops:
            raise ValueError(f"a path of {len(path)} links is longer than {self.max_hops}")
        if self.n == len(self.rc):
            self._grow()
        i = self.n
        self.n += 1
        self.path[i, : len(path)] = path
        self.line_bps[i] = self.rc[i] = self.rt[i] = line_rate_bps
        self.backlog[i] = np.inf
        self.alpha[i] = self.dcqcn.initial_alpha_value / ALPHA_SCALE
        return i

    def _grow(self) -> None:
        cap = 2 * len(self.rc)
        for name in (
            "line_bps",
            "rc",
            "rt",
            "alpha",
            "rp_on",
            "active",
            "backlog",
            "timer_s",
            "bytes_since",
            "t_events",
            "b_events",
            "inc_since",
        ):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
        path = np.full((cap, self.max_hops), NO_LINK, dtype=np.int64)
        path[: len(self.path)] = self.path
        self.path = path

    # -- one step ---------------------------------------------------------------------------
    def step(self) -> StepResult:
        """One step over the live queue pairs: the active ones and those whose reaction point
        still runs (an idle queue pair recovers its rate as a NIC's does). The others send
        nothing and change nothing, so a run whose phases open many queue pairs pays each step
        for those in play, not for every one it ever opened."""
        n, dt, links = self.n, self.dt, self.links
        live = np.flatnonzero(self.active[:n] | self.rp_on[:n])
        m = len(live)
        path = self.path[live]
        hop = np.where(path >= 0, path, self.n_links)  # padding -> the spare slot
        real = path >= 0
        # the NIC arbiter: each NIC's line rate over its queue pairs, max-min fair (its round
        # robin: a queue pair below its fair share keeps its rate, the rest share what is left)
        x = np.where(
            self.active[live], np.minimum(self.rc[live], self.backlog[live] * 8.0 / dt), 0.0
        )
        cap = links.capacity_bps
        x = max_min_share(x, path[:, 0], cap) if m else x
        # each hop's arrival: the rate limited by the hops before it (their last step's share)
        shares = self._ratio[hop]
        upstream = np.ones_like(shares)
        if self.max_hops > 1:
            upstream[:, 1:] = np.minimum.accumulate(shares[:, :-1], axis=1)
        arriving = x[:, None] * upstream * real
        arrivals = np.bincount(hop.ravel(), weights=arriving.ravel(), minlength=self.n_links + 1)
        arrivals = arrivals[: self.n_links]
        # the queues: the excess over the rate waits, below the rate the queue drains
        q = self.queue_bytes
        grown = q + (arrivals - cap) * dt / 8.0
        limit = np.minimum(links.xoff_bytes, links.buffer_bytes)
        held = grown >= limit  # PFC (or a full buffer): the queue stays at its limit
        new_q = np.clip(grown, 0.0, limit)
        # what the queue took in: arrivals, less what PFC held back upstream at its limit (the
        # senders keep it: lossless); what the link sent: that, plus what the queue drained
        accepted = arrivals - np.maximum(grown - limit, 0.0) * 8.0 / dt
        sent = accepted + (q - new_q) * 8.0 / dt  # b/s
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(arrivals > sent, sent / arrivals, 1.0)
            admitted = np.where(held & (arrivals > 0), accepted / arrivals, 1.0)
        ratio = np.where(np.isfinite(ratio), ratio, 1.0)
        admitted = np.where(np.isfinite(admitted), admitted, 1.0)
        self._ratio[: self.n_links] = ratio
        pfc = held & np.isfinite(links.xoff_bytes)
        self.pauses += pfc & ~self._paused_now
        self.paused_s += np.where(pfc, dt, 0.0)
        self._paused_now = pfc
        self.queue_bytes = new_q
        # What each queue pair's source sends: its rate, held back only where PFC (or a full
        # buffer) holds a queue on its path; the rest of what it sends above a link's rate waits
        # in that link's queue (and a message's last byte then waits the path's queues before it
        # arrives: FlowReplay). Crediting only the link's share instead, while the queue also grew
        # by the excess, counted the queued bytes twice: a message took twice as long to send
        # behind a 2:1 collision and its queue grew past what the packet simulator's did.
        hold = np.append(admitted, 1.0)  # the padding slot
        sent_src = x * np.min(np.where(real, hold[hop], 1.0), axis=1) if m else x
        delivered = sent_src * dt / 8.0
        self.backlog[live] = np.maximum(self.backlog[live] - delivered, 0.0)
        # what reaches the receiver now: each queue pair's share of its most loaded link (FIFO)
        through = x * np.min(np.where(real, self._ratio[hop], 1.0), axis=1) if m else x
        # marking on the queue each port held over the step, combined over the path
        p_link = self._marking((q + new_q) / 2.0)  # the queue the step's packets met, on average
        keep = np.prod(np.where(real, 1.0 - p_link[np.minimum(hop, self.n_links - 1)], 1.0), axis=1)
        p_path = 1.0 - keep if m else keep
        packets = through * dt / self.mtu_bits
        p_step = cnp_probability(keep, packets)
        cnps = (self.rng.random(m) < p_step) & (packets > 0) & self.reacts
        self.react(cnps, delivered, live)
        link_marks = arrivals * dt / self.mtu_bits * p_link
        return StepResult(live, delivered, cnps, packets * p_path, sent * dt / 8.0, link_marks)

    def _marking(self, q: np.ndarray) -> np.ndarray:
        links = self.links
        with np.errstate(invalid="ignore"):
            span = np.maximum(links.kmax_bytes - links.kmin_bytes, 1.0)
            linear = links.pmax * (q - links.kmin_bytes) / span
        p = np.where(q > links.kmax_bytes, 1.0, np.where(q > links.kmin_bytes, linear, 0.0))
        return np.nan_to_num(p, nan=0.0)

    def react(self, cnp: np.ndarray, delivered: np.ndarray, qps: np.ndarray | None = None) -> None:
        """The reaction point of the queue pairs `qps` (all when None; `cnp` and `delivered`
        are theirs, in that order) for one step (one rate-decrease period)."""
        sel = np.arange(self.n) if qps is None else qps
        state = {name: getattr(self, name)[sel] for name in REACTION_STATE}
        self._react(cnp, delivered, line_bps=self.line_bps[sel], **state)
        for name, values in state.items():
            getattr(self, name)[sel] = values

    def _react(
        self,
        cnp: np.ndarray,
        delivered: np.ndarray,
        *,
        rc: np.ndarray,
        rt: np.ndarray,
        alpha: np.ndarray,
        rp_on: np.ndarray,
        inc_since: np.ndarray,
        timer_s: np.ndarray,
        bytes_since: np.ndarray,
        t_events: np.ndarray,
        b_events: np.ndarray,
        line_bps: np.ndarray,
    ) -> None:
        on = rp_on
        first = cnp & ~on
        if first.any():
            # the episode's first CNP starts the reaction point: alpha at its initial value
            # (this CNP adds nothing to it), and its cut keeps the target (the line rate)
            on |= first
            alpha[first] = self.dcqcn.initial_alpha_value / ALPHA_SCALE
            inc_since[first] = False
            if self._first_rate is not None:
                rc[first] = rt[first] = np.minimum(self._first_rate, line_bps[first])
        # alpha: (1-g) per alpha period, + g for the period with a CNP
        later = cnp & ~first
        alpha[on] = alpha[on] * self._decay + np.where(later[on], self._g, 0.0)
        # a CNP in the step: a cut at its end; the target follows the current rate only after
        # an increase event since the last cut (or with clamp_tgt_rate)
        cut = cnp & on
        if cut.any():
            inc = inc_since
            clamp = cut & (inc | self.dcqcn.clamp_tgt_rate)
            rt[clamp] = rc[clamp]
            inc[cut] = False
            lowered = rc[cut] * (1.0 - alpha[cut] / 2.0)
            floor = np.maximum(rc[cut] * self._min_dec, self._min_rate)
            rc[cut] = np.maximum(lowered, floor)
            timer_s[cut] = 0.0
            bytes_since[cut] = 0.0
            t_events[cut] = 0.0
            b_events[cut] = 0.0
        # increase events from the timer and the byte counter, since the last cut
        grow = on & ~cut
        if grow.any():
            timer = timer_s
            sent = bytes_since
            slack = 1e-9  # a step sum that lands on a period boundary counts as reaching it
            t_new = np.floor((timer + self.dt) / self._timer_s + slack) - np.floor(
                timer / self._timer_s + slack
            )
            b_new = np.floor((sent + delivered) / self._byte_reset) - np.floor(
                sent / self._byte_reset
            )
            timer += np.where(grow, self.dt, 0.0)
            sent += np.where(grow, delivered, 0.0)
            t_new = np.where(grow, t_new, 0.0)
            b_new = np.where(grow, b_new, 0.0)
            t_ev, b_ev = t_events, b_events
            t_ev += t_new
            b_ev += b_new
            event = (t_new + b_new) > 0
            inc = inc_since
            inc |= b_new > 0
            if self.dcqcn.clamp_tgt_rate_after_time_inc:
                inc |= t_new > 0
            f = self._threshold
            fast = event & (np.maximum(t_ev, b_ev) <= f)
            hyper = event & (np.minimum(t_ev, b_ev) > f)
            additive = event & ~fast & ~hyper
            rt += np.where(additive, self._ai, 0.0) + np.where(hyper, self._hai, 0.0)
            line = line_bps
            np.minimum(rt, line, out=rt)
            rc[event] = (rt[event] + rc[event]) / 2.0
            # back within rpg_min_rate of line rate: the rate limiter is released
            done = on & (rc >= line - self._min_rate)
            rc[done] = rt[done] = line[done]
            on &= ~done
