"""The timing verdict: the engine's own fidelity checks, in target time (collectors.fidelity judges
the tables; a backend adds what only it can see).

Timing is judged per worker and in target time: a tick that fires `late` wall seconds after it
was due delays every timer it runs (DCQCN's rate-decrease check, the CNP interval, the increase
timer, retransmission) by late / TDF in the target's timescale. The p99 of that lateness must
stay within DCQCN's shortest reaction timer (rate_reduce_monitor_period, min_time_between_cnps:
a CNP is acted on within one such period on a NIC) and the maximum within one increase period
(rpg_time_reset: a whole increase step missed changes the rate trajectory). CPU is the engine's
own: each worker's CPU time over the run's wall time (other tenants of the machine are not the
run; what they take shows up as lateness). The pacing deficit is what the rates allowed but ticks
came too late to send (the token buckets' floor cut it), over what was sent: above 5% the rates
and FCTs measured are the machine's. A check without the numbers it needs says unknown.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any

from emulator.transport.params import DcqcnParams

BURST_SHARE_LIMIT = 0.05  # a flow may pass at most this share of its bytes above line rate
# Pacing deficit: bytes the rates allowed that late ticks could not send, as a share of what was
# sent. It delays sending by at most that share, so it biases busbw and FCTs by at most as much:
# above 5% that is more than this machine's run-to-run spread (moe_mix, three runs: All-Reduce
# busbw 14.14-14.74 GB/s, 4%), and the measured rates are the machine's, not DCQCN's. (1% made
# verdicts flip between runs of a 4 s job on a 2-core machine: 1.3% and 3.4% at one factor.)
PACING_DEFICIT_LIMIT = 0.05
# Dependency latency: a flow released by another's completion starts after the completion has
# gone through the coordinator (and, over a cluster, through the driver), a delay no NIC of the
# target has. Each step of a multi-step collective adds it: judged, like the pacing deficit,
# at 5% of the median flow's FCT.
DEPENDENCY_SHARE_LIMIT = 0.05


def burst_reason(
    flow_bytes: list[int],
    fabric: dict[str, Any],
    fct_s: list[float] | None = None,
    rate_bps: float | None = None,
) -> str | None:
    """Flows short next to the links' shaper bursts finish faster than the emulated rate allows.

    After an idle spell an HTB class passes its burst at the veth's speed, at every shaped hop
    of a path: a flow gains at most hops x burst bytes, i.e. saves at most hops x burst /
    (link rate) of target time (the burst is in wall bytes, the rate dilated alike). Judged
    against the median measured FCT (`fct_s`, finished flows) at the slowest link rate
    (`rate_bps`, target): a flow sharing its ports with others takes far longer than its bytes
    at line rate, and the burst's share of it is that much smaller. Without FCTs, against the
    median flow's bytes (as if alone at line rate: the upper bound)."""
    burst = fabric.get("shaper_burst_bytes", 0) * fabric.get("shaped_hops_max", 0)
    if not flow_bytes or not burst:
        return None
    hops = (
        f"{fabric['shaper_burst_bytes']} bytes per hop after idle, up to "
        f"{fabric['shaped_hops_max']} hops"
    )
    fcts = sorted(f for f in (fct_s or []) if f and f > 0)
    if fcts and rate_bps:
        median_fct = fcts[len(fcts) // 2]
        saved_s = burst * 8 / rate_bps
        if saved_s <= BURST_SHARE_LIMIT * median_fct:
            return None
        return (
            f"the median flow's FCT ({median_fct * 1e6:.3g} us) is short next to what the shaped "
            f"links' burst tolerance can save ({hops}: {saved_s * 1e6:.3g} us at "
            f"{rate_bps / 1e9:g} Gb/s): it can read up to {saved_s / median_fct:.0%} short and "
            "busbw high; use larger messages or a higher TDF"
        )
    median = sorted(flow_bytes)[len(flow_bytes) // 2]
    if burst <= BURST_SHARE_LIMIT * median:
        return None
    return (
        f"the median flow ({median} bytes) is short next to the shaped links' burst tolerance "
        f"({hops}): its FCT can read up to {burst / median:.0%} short and busbw high; use "
        "larger messages or a higher TDF"
    )


def dependency_reason(latency: dict[str, Any], fct_s: list[float]) -> str | None:
    """The engine's dependency latency (`latency`: summary engine.dependency_latency, per
    same_server / cross_server the target-time p50 of completion -> released flow) against the
    median measured FCT: a collective of k steps in a row reads about k x p50 slower than the
    fabric makes it, its busbw low by about p50 over a step's FCT."""
    fcts = sorted(f for f in fct_s if f and f > 0)
    timed = {
        label: v["target_p50_us"] * 1e-6
        for label, v in latency.items()
        if isinstance(v, dict) and v.get("count") and v.get("target_p50_us") is not None
    }
    if not fcts or not timed:
        return None
    median_fct = fcts[len(fcts) // 2]
    label = max(timed, key=lambda k: timed[k])
    p50_s = timed[label]
    if p50_s <= DEPENDENCY_SHARE_LIMIT * median_fct:
        return None
    where = " across servers" if label == "cross_server" else ""
    return (
        f"flows released by another flow's completion{where} started {p50_s * 1e6:.3g} us "
        f"(target time, p50) after it, {p50_s / median_fct:.0%} of the median flow's FCT "
        f"({median_fct * 1e6:.3g} us): the engine's control path, not the fabric; each step of "
        "a multi-step collective reads that much slower and its busbw low; raise the TDF"
    )


# The engine's own delay in a flow (events.FlowFinished.engine_delay_s: how long the flow's last
# byte and its last ACK waited in their sockets before a worker read them, or how overdue the
# worker's schedule was then if that was longer (emulator.engine.reports), plus
# the pacing credit its queue pair or NIC lost while it had a packet due) is time the flow's FCT
# carries that no fabric put there. Judged at the share of FCT the verdict's promise tolerates
# (docs: each collective type's busbw and FCT percentiles within 5% of the same job's reference),
# as the run-wide pacing deficit and the dependency latency are: the bytes-weighted share of the
# type's FCTs (what its busbw mean is biased by) and how far its p99 FCT moves when the delay is
# taken out (what its tail is biased by).
ENGINE_DELAY_SHARE_LIMIT = 0.05


def engine_delay_shares(
    flows: Iterable[tuple[str, int, float | None, float | None]],
) -> dict[str, dict[str, float]]:
    """Per collective type, how much of its flows' FCTs is the engine's own delay: `fct_share`
    (the bytes-weighted share of each flow's FCT) and `p99_fct_shift` (its p99 FCT over the p99
    with each flow's delay taken out, minus 1). `flows` are (collective type, bytes, fct_s,
    engine_delay_s); finished flows with a delay count (a simulation has none)."""
    by_type: dict[str, list[tuple[int, float, float]]] = {}
    for ctype, nbytes, fct, delay in flows:
        if fct is not None and fct > 0 and delay is not None:
            by_type.setdefault(ctype, []).append((nbytes, fct, min(max(delay, 0.0), fct)))
    out = {}
    for ctype, rows in sorted(by_type.items()):
        total = sum(b for b, _, _ in rows)
        p99 = _p99([fct for _, fct, _ in rows])
        p99_without = max(_p99([fct - lag for _, fct, lag in rows]), 1e-12)
        out[ctype] = {
            "fct_share": sum(b * lag / fct for b, fct, lag in rows) / total if total else 0.0,
            "p99_fct_shift": p99 / p99_without - 1.0,
        }
    return out


def engine_delay_reason(
    shares: dict[str, dict[str, float]], limit: float = ENGINE_DELAY_SHARE_LIMIT
) -> str | None:
    """The engine's delay (engine_delay_shares) against each collective type's FCTs; None when
    every type is within `limit`."""
    said = [
        f"{ctype} {v['fct_share']:.1%} of its FCTs (bytes-weighted), its p99 FCT "
        f"{v['p99_fct_shift']:+.1%}"
        for ctype, v in shares.items()
        if max(v["fct_share"], v["p99_fct_shift"]) > limit
    ]
    if not said:
        return None
    return (
        "the engine's own delay in the flows (the last bytes and ACKs waiting in the sockets "
        "or the workers behind schedule when they read them, pacing credit lost to late ticks) "
        "was over "
        f"{limit * 100:g}% of what they measured: "
        + "; ".join(said)
        + ": busbw and FCTs carry the machine's delays; raise the TDF"
    )


def flow_delays(tables: Any) -> list[tuple[str, int, float | None, float | None]]:
    """engine_delay_shares' rows from a run's flows table (no engine delay column: none)."""
    from collectors.tables import rows

    if "engine_delay_s" not in tables.flows.column_names:
        return []
    return list(rows(tables.flows, ("collective_type", "bytes", "fct_s", "engine_delay_s")))


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(0.99 * len(ordered)) - 1))]


def timing_limits_s(dcqcn: DcqcnParams) -> tuple[float, float]:
    """(p99 limit, max limit) of tick lateness in target seconds, from DCQCN's own timers
    (undilated: the target's)."""
    positive = [
        t for t in (dcqcn.rate_reduce_monitor_period_us, dcqcn.min_time_between_cnps_us) if t > 0
    ]
    reaction_us = min(positive) if positive else dcqcn.dce_tcp_rtt_us
    return reaction_us * 1e-6, dcqcn.rpg_time_reset_us * 1e-6


def engine_checks(
    metadata: dict[str, Any],
    tdf: float,
    dcqcn: DcqcnParams,
    busy_limit: float,
    deficit_limit: float = PACING_DEFICIT_LIMIT,
    workers: Collection[int] | None = None,
) -> tuple[list[str], list[str]]:
    """(reasons, unknown): the engine's timing and CPU judged per worker (`deficit_limit`: the
    pacing deficit's, the run's by default; emulator.timescale.probe passes its own; `workers`: only
    these, by index: one server's of a cluster)."""
    reasons: list[str] = []
    unknown: list[str] = []
    p99_limit_s, max_limit_s = timing_limits_s(dcqcn)
    servers = metadata.get("worker_servers") or []  # a run over a cluster: each worker's

    def worker(index: int) -> str:
        where = f" on server {servers[index]}" if index < len(servers) else ""
        return f"engine worker {index}{where}"

    def mine(values: Any) -> list[tuple[int, Any]]:
        listed = list(enumerate(values or []))
        return listed if workers is None else [(i, v) for i, v in listed if i in workers]

    lateness = mine(metadata.get("worker_tick_lateness"))
    if not lateness or any(not isinstance(w, dict) or not w.get("ticks") for _, w in lateness):
        unknown.append("tick lateness: a worker reported no ticks")
    for index, w in lateness:
        if not isinstance(w, dict) or not w.get("ticks"):
            continue
        p99_s, max_s = w["p99_s"] / tdf, w["max_s"] / tdf
        if p99_s > p99_limit_s:
            reasons.append(
                f"{worker(index)}: 1% of its ticks came {p99_s * 1e6:.2g} us (target time) "
                f"late or more, over DCQCN's {p99_limit_s * 1e6:g} us reaction timer "
                f"({w['p99_s'] * 1e3:.1f} ms wall): CNPs and rate changes were acted on late; "
                "raise the TDF"
            )
        if max_s > max_limit_s:
            reasons.append(
                f"{worker(index)}: a tick came {max_s * 1e6:.3g} us (target time) late, "
                f"over DCQCN's {max_limit_s * 1e6:g} us increase period ({w['max_s'] * 1e3:.0f} "
                "ms wall): a rate step was missed"
            )
    pacing = mine(metadata.get("worker_pacing"))
    if not pacing or any(not isinstance(w, dict) for _, w in pacing):
        unknown.append("pacing deficit: a worker reported no pacing counters")
    for index, w in pacing:
        if not isinstance(w, dict) or not w.get("sent_bytes"):
            continue
        share = w["lost_bytes"] / w["sent_bytes"]
        if share > deficit_limit:
            reasons.append(
                f"{worker(index)}: its ticks came too late to send {share:.1%} more bytes "
                "than it sent, which the queue pairs' rates allowed (pacing deficit): rates and "
                "FCTs are the machine's; raise the TDF"
            )
    busy = mine(metadata.get("worker_busy_ratio"))
    if not busy:
        unknown.append("engine CPU: no worker reported its CPU time")
    for index, share in busy:
        if share >= busy_limit:
            reasons.append(
                f"{worker(index)} was on a CPU {share:.0%} of the run: pacing may have "
                "fallen behind; raise the TDF"
            )
    return reasons, unknown
