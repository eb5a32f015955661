"""The load-balancing study's checks: the questions it answers, each with a verdict.

- spray_gbn_collapses: spraying under go-back-N turns reordering into NAKs and resends (every
  early packet is a gap to an in-order responder, which drops what follows and makes the sender
  go back): the resent share far above the baseline's, and busbw below it;
- spray_sel_removes_ecmp_imbalance: spraying with selective repeat spreads the leaf uplinks'
  load evenly (their MMR below the baseline's) without losing bandwidth (busbw at least the
  baseline's);
- selective_resends_little:<condition>: with selective repeat, a condition that reorders still
  resends only a small share of what it sends;
- spray_sel_vs_hash_ecmp: the user's question, does spraying with a reorder-tolerant transport
  remove the need for host-side port balancing? Asked of a scenario whose queue pairs take
  hashed source ports (collectives.sport_policy hash, the *_ecmp.yaml scenarios): spray-sel's
  busbw against ECMP's with those ports.

The verdict rule is the interference study's (emulator.studies.stats.verdict.judge: an effect is
shown when its ratio passes the threshold and the interval of the ratio lies beyond 1, not
measurable below repeats_min repeats a side); two levels need a rule of their own, said where
they are judged: "at least the baseline's busbw" (non-inferiority: the interval's lower end at
or above busbw_noninferior_min) and "resends little" (the interval's upper end at or below
selective_resend_share_max). A check of several parts (resends and busbw) is shown when every
part is, not measurable when a part is. Checks whose conditions did not run are left out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from emulator.config import param
from emulator.studies.load_balancing.analysis import LEAF_UPLINKS, PER_RUN, RUN, Analysis, Cell
from emulator.studies.load_balancing.conditions import BASELINE, CONDITIONS
from emulator.studies.load_balancing.runs import LbRun
from emulator.studies.stats.bootstrap import Interval
from emulator.studies.stats.estimates import Comparison, Estimate
from emulator.studies.stats.flags import flagged_text, judged_runs, with_flagged
from emulator.studies.stats.formatting import fmt_interval
from emulator.studies.stats.verdict import Check, Verdict, Worse, judge

NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class LbThresholds:
    """How large an effect must be to count as shown."""

    resend_ratio_min: float = param(
        10.0,
        doc="spray-gbn / ecmp-gbn resent share at or above which go-back-N's resends count as a "
        "collapse (with the interval above 1; from a baseline of none, the difference above 0)",
        min=1.0,
    )
    collapse_resend_share_min: float = param(
        0.01,
        doc="resent / sent of spray-gbn below which its resends are too few to be a collapse "
        "whatever the ratio (a few resends over a baseline of none is a large ratio)",
        min=0.0,
        max=1.0,
    )
    busbw_ratio_max: float = param(
        0.9,
        doc="busbw mean condition / baseline at or below which the loss of bandwidth is shown "
        "(with the interval below 1)",
        min=0.0,
        max=1.0,
    )
    mmr_ratio_max: float = param(
        0.9,
        doc="leaf-uplink MMR spray-sel / ecmp-gbn at or below which the imbalance counts as "
        "reduced (with the interval below 1)",
        min=0.0,
        max=1.0,
    )
    busbw_noninferior_min: float = param(
        0.95,
        doc="busbw mean spray-sel / ecmp-gbn: the lower end of its interval at or above this "
        "counts as at least the baseline's (non-inferiority margin)",
        min=0.0,
        max=1.0,
    )
    selective_resend_share_max: float = param(
        0.01,
        doc="resent / sent of a selective condition: the upper end of its interval at or below "
        "this counts as resending little",
        min=0.0,
        max=1.0,
    )
    sport_gain_min: float = param(
        1.1,
        doc="busbw mean spray-sel / ecmp-gbn with hashed source ports at or above which spraying "
        "is shown to recover what hashing loses (with the interval above 1)",
        min=1.0,
    )
    repeats_min: int = param(
        2,
        doc="repeats with data on each side below which a check is not measurable (one run's "
        "interval leaves out run-to-run variation)",
        min=1,
    )


DEFAULT_LB_THRESHOLDS = LbThresholds()
Part = tuple[Verdict, str]


def relabel(detail: str, condition: str) -> str:
    """judge()'s text names the sides alone and mixed (the interference study's): here they
    are the baseline and the condition."""
    for old, new in (
        ("mixed/alone", f"{condition}/{BASELINE}"),
        ("mixed - alone", f"{condition} - {BASELINE}"),
        ("in the alone runs", f"in the {BASELINE} runs"),
        ("in the mixed runs", f"in the {condition} runs"),
        ("repeats alone (", f"repeats {BASELINE} ("),
        (" mixed (", f" {condition} ("),
        ("the alone ", f"the {BASELINE} "),
        ("from the floor alone", f"from the {BASELINE} floor"),
    ):
        detail = detail.replace(old, new)
    return detail


def combine(parts: Sequence[Part]) -> Verdict:
    """Shown when every part is, not measurable when a part is, else not shown."""
    verdicts = [v for v, _ in parts]
    if "not measurable" in verdicts or not verdicts:
        return "not measurable"
    return "shown" if all(v == "shown" for v in verdicts) else "not shown"


def _measurable(e: Estimate, what: str, repeats_min: int) -> str | None:
    """Why a level cannot be judged (None: it can)."""
    if not e.measurable:
        return f"fewer than 2 {what} with a value ({e.units})"
    if e.repeats < repeats_min:
        return f"{e.repeats} repeat with a value; {repeats_min} needed to judge"
    return None


def noninferior(c: Comparison, what: str, minimum: float, repeats_min: int) -> Part:
    """At least the baseline's: the lower end of the ratio's interval at or above minimum."""
    for side, e in ((BASELINE, c.alone), ("the condition", c.mixed)):
        why = _measurable(e, f"units in {side}", repeats_min)
        if why is not None:
            return "not measurable", why
    if c.ratio is None or c.ratio_interval is None:
        return "not measurable", f"{what} ratio undefined ({c.ratio_undefined})"
    text = f"{what} ratio {fmt_interval(c.ratio, c.ratio_interval)}"
    if c.ratio_interval[0] >= minimum:
        return "shown", f"{text}: its interval at or above {minimum:g}"
    return "not shown", f"{text}: its interval reaches below {minimum:g}"


def _lower(interval: Interval | None) -> bool:
    return interval is not None and interval[1] < 1.0


class Judge:
    """The checks over one analysis and its runs."""

    def __init__(
        self,
        analysis: Analysis,
        runs: Sequence[LbRun],
        thresholds: LbThresholds,
        confidence: float,
        include_flagged: bool,
    ) -> None:
        self.a, self.runs, self.t = analysis, runs, thresholds
        self.confidence, self.include_flagged = confidence, include_flagged

    def versus(self, condition: str, metric: str, of: str = RUN) -> Comparison | None:
        cell: Cell | None = self.a.cell(condition, metric, of)
        return None if cell is None else cell.versus

    def judged(self, c: Comparison, what: str, units: str, threshold: float, worse: Worse) -> Part:
        verdict, detail = judge(
            c, what, units, threshold, self.t.repeats_min, self.confidence, worse=worse
        )
        return verdict, detail

    def busbw_parts(self, condition: str, rule: Callable[[Comparison, str], Part]) -> list[Part]:
        """rule(comparison, collective type) for each collective type, its text prefixed."""
        parts = []
        for ctype in self.a.types:
            c = self.versus(condition, "busbw_mean_GBps", ctype)
            if c is not None:
                verdict, detail = rule(c, ctype)
                parts.append((verdict, f"{ctype} busbw: {relabel(detail, condition)}"))
        return parts

    def finish(self, check: Check, conditions: Sequence[str]) -> Check:
        """What the flagged runs did to the check: not measurable where every run of a condition
        is left out; else the detail names the flagged runs it read (include_flagged, or runs
        whose only flag the study waives, emulator.studies.load_balancing.runs)."""
        sides = []
        for name in conditions:
            every = [r for r in self.runs if r.condition == name]
            sides.append((name, every, judged_runs(every, self.include_flagged)))
        verdict, detail, flagged = with_flagged(check.verdict, check.detail, sides)
        waived = [r for _, _, kept in sides for r in kept if r.waived]
        if waived:
            named = [(r.name, r.waived) for r in waived]
            detail += (
                "; judged on runs flagged only for the resends their condition causes: "
                + flagged_text(named)
            )
            flagged += tuple(flagged_text([one]) for one in named)
        return dataclasses.replace(check, verdict=verdict, detail=detail, flagged=flagged)


def _check(
    name: str,
    question: str,
    expected: str,
    verdict: Verdict,
    c: Comparison | None,
    threshold: float,
    detail: str,
    numbers: Mapping[str, float | None],
) -> Check:
    """A Check whose alone side is the baseline and mixed side the condition."""
    if c is None:
        return Check(
            name, question, expected, verdict, None, None, None, threshold, detail, numbers
        )
    return Check(
        name,
        question,
        expected,
        verdict,
        c.alone.point,
        c.mixed.point,
        c.ratio,
        threshold,
        detail,
        numbers,
        c.alone.interval,
        c.mixed.interval,
        c.ratio_interval,
        c.difference,
        c.difference_interval,
        c.ratio_undefined,
    )


def _busbw_numbers(j: Judge, condition: str) -> dict[str, float | None]:
    numbers: dict[str, float | None] = {}
    for ctype in j.a.types:
        c = j.versus(condition, "busbw_mean_GBps", ctype)
        if c is None:
            continue
        low, high = c.ratio_interval or (None, None)
        numbers |= {
            f"busbw_ratio_{ctype}": c.ratio,
            f"busbw_ratio_{ctype}_low": low,
            f"busbw_ratio_{ctype}_high": high,
            f"busbw_{BASELINE}_{ctype}_GBps": c.alone.point,
            f"busbw_{condition}_{ctype}_GBps": c.mixed.point,
        }
    return numbers


def check_spray_gbn_collapses(j: Judge) -> Check:
    condition, t = "spray-gbn", j.t
    c = j.versus(condition, "retransmitted_share")
    parts: list[Part] = []
    if c is None:
        parts.append(("not measurable", "no resent share in the runs"))
    else:
        verdict, detail = j.judged(c, "resent share", PER_RUN, t.resend_ratio_min, "higher")
        share = c.mixed.point
        if verdict == "shown" and share is not None and share < t.collapse_resend_share_min:
            verdict = "not shown"
            detail += f"; but only {share:.4f} of the packets sent were resent"
        parts.append((verdict, f"resends: {relabel(detail, condition)}"))

    def lower(c: Comparison, ctype: str) -> Part:
        units = f"complete {ctype} instances"
        return j.judged(c, "busbw mean", units, t.busbw_ratio_max, "lower")

    busbw = j.busbw_parts(condition, lower)
    # Lower for at least one type: a type that never crosses a balancing tier (a collective
    # within one leaf) is not sprayed and keeps its busbw.
    if any(v == "shown" for v, _ in busbw):
        parts.append(("shown", "; ".join(d for _, d in busbw)))
    else:
        parts.append(
            (combine(busbw) if busbw else "not measurable", "; ".join(d for _, d in busbw))
        )
    naks = j.versus(condition, "naks_sent")
    numbers = {
        "naks_sent_mean": None if naks is None else naks.mixed.point,
        "naks_sent_mean_baseline": None if naks is None else naks.alone.point,
        **_busbw_numbers(j, condition),
    }
    check = _check(
        "spray_gbn_collapses",
        "Does spraying with go-back-N collapse into NAKs and resends, losing bandwidth?",
        "resends far above ECMP's, busbw below",
        combine(parts),
        c,
        t.resend_ratio_min,
        " | ".join(d for _, d in parts),
        numbers,
    )
    return j.finish(check, (BASELINE, condition))


def check_spray_sel_balance(j: Judge) -> Check:
    condition, t = "spray-sel", j.t
    parts: list[Part] = []
    c = j.versus(condition, "mmr", LEAF_UPLINKS)
    if not j.a.groups:
        parts.append(
            (
                "not measurable",
                f"{NOT_MEASURED}: no run's summary.json has a load_balance section, so the "
                "links' balance is unknown",
            )
        )
    elif c is None:
        parts.append(
            ("not measurable", f"{NOT_MEASURED}: load_balance has no {LEAF_UPLINKS} group")
        )
    else:
        verdict, detail = j.judged(c, "leaf-uplink MMR", PER_RUN, t.mmr_ratio_max, "lower")
        parts.append((verdict, f"MMR: {relabel(detail, condition)}"))

    def at_least(c: Comparison, _: str) -> Part:
        return noninferior(
            c, f"{condition}/{BASELINE} busbw", t.busbw_noninferior_min, t.repeats_min
        )

    busbw = j.busbw_parts(condition, at_least)
    parts += busbw or [("not measurable", "no complete collective instances")]
    check = _check(
        "spray_sel_removes_ecmp_imbalance",
        "Does spraying with selective repeat balance the leaf uplinks better than ECMP, "
        "without losing bandwidth?",
        "leaf-uplink MMR below ECMP's, busbw at least ECMP's",
        combine(parts),
        c,
        t.mmr_ratio_max,
        " | ".join(d for _, d in parts),
        _busbw_numbers(j, condition),
    )
    return j.finish(check, (BASELINE, condition))


def check_selective_resends_little(j: Judge, condition: str) -> Check:
    maximum = j.t.selective_resend_share_max
    cell = j.a.cell(condition, "retransmitted_share")
    e = None if cell is None else cell.estimate
    verdict: Verdict
    why = "no resent share" if e is None else _measurable(e, PER_RUN, j.t.repeats_min)
    if why is not None or e is None:
        verdict, detail = "not measurable", str(why)
    else:
        text = f"resent / sent {fmt_interval(e.point, e.interval, '.4g')} ({j.confidence:.0%} CI)"
        high = e.point if e.interval is None else e.interval[1]
        if high is not None and high <= maximum:
            verdict, detail = "shown", f"{text}: at or below {maximum:g}"
        else:
            verdict, detail = "not shown", f"{text}: reaches above {maximum:g}"
    packets = j.a.cell(condition, "retransmitted_packets")
    check = Check(
        f"selective_resends_little:{condition}",
        f"Does {condition} (selective repeat) resend only a small share of what it sends?",
        f"resent / sent <= {maximum:g}",
        verdict,
        None,
        None if e is None else e.point,
        None,
        maximum,
        detail,
        {"retransmitted_packets_mean": None if packets is None else packets.estimate.point},
        mixed_ci=None if e is None else e.interval,
    )
    return j.finish(check, (condition,))


def check_spray_sel_vs_hash_ecmp(j: Judge, sport_policy: str | None) -> Check:
    condition, t = "spray-sel", j.t

    def gain(c: Comparison, ctype: str) -> Part:
        units = f"complete {ctype} instances"
        return j.judged(c, "busbw mean", units, t.sport_gain_min, "higher")

    busbw = j.busbw_parts(condition, gain)
    verdict: Verdict
    if not busbw:
        verdict = "not measurable"
    elif any(v == "shown" for v, _ in busbw):
        verdict = "shown"
        for ctype in j.a.types:  # not at another type's cost
            c = j.versus(condition, "busbw_mean_GBps", ctype)
            if c is not None and _lower(c.ratio_interval):
                verdict = "not shown"
    else:
        verdict = combine(busbw)
    detail = "; ".join(d for _, d in busbw) or "no complete collective instances"
    if sport_policy != "hash":
        verdict = "not measurable"
        detail = (
            f"the scenario's collectives.sport_policy is {sport_policy or 'unknown'}, not hash: "
            "its ECMP baseline already places the queue pairs' ports, so it cannot say whether "
            f"spraying removes the need to (run the study on a *_ecmp.yaml scenario); {detail}"
        )
    first = j.versus(condition, "busbw_mean_GBps", j.a.types[0]) if j.a.types else None
    check = _check(
        "spray_sel_vs_hash_ecmp",
        "Does spraying with a reorder-tolerant transport remove the need for host-side port "
        "balancing (spray-sel busbw against ECMP with hashed source ports)?",
        "busbw above hashed ECMP's",
        verdict,
        first,
        t.sport_gain_min,
        detail,
        {**_busbw_numbers(j, condition), "sport_policy_hash": float(sport_policy == "hash")},
    )
    return j.finish(check, (BASELINE, condition))


def judge_checks(
    analysis: Analysis,
    runs: Sequence[LbRun],
    thresholds: LbThresholds = DEFAULT_LB_THRESHOLDS,
    confidence: float = 0.95,
    include_flagged: bool = False,
    sport_policy: str | None = None,
) -> tuple[Check, ...]:
    """Every check whose conditions ran (module docstring)."""
    j = Judge(analysis, runs, thresholds, confidence, include_flagged)
    ran = {r.condition for r in runs}
    out: list[Check] = []
    if {BASELINE, "spray-gbn"} <= ran:
        out.append(check_spray_gbn_collapses(j))
    if {BASELINE, "spray-sel"} <= ran:
        out.append(check_spray_sel_balance(j))
    for name, condition in CONDITIONS.items():
        if name in ran and condition.reliability == "selective" and condition.reorders:
            out.append(check_selective_resends_little(j, name))
    if {BASELINE, "spray-sel"} <= ran:
        out.append(check_spray_sel_vs_hash_ecmp(j, sport_policy))
    return tuple(out)
