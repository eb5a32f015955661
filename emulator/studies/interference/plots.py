"""The interference study's figures in the Chakra paper's form, over every repeat of each role.

- seed_fig10_busbw.png (the paper's Fig. 10 a-c): busbw per iteration, (a) All-Reduce alone,
  (b) All-to-All alone, (c) both in the mix; per collective type the mean over repeats of each
  iteration's mean busbw, with its 95% confidence band;
- seed_fig11_fct_cdf.png (Fig. 11): per collective type, the FCT CDF alone and mixed (log x),
  the CDF of every repeat's flows pooled, with the 95% band of the repeats' CDFs at each FCT.

A band is Student's t interval of the mean over repeats, mean +- t(0.975, n - 1) * s / sqrt(n),
pointwise (at each iteration, or at each FCT on a common grid): repeats are the independent units
(a seed each); the instances or flows inside one run are not. With one repeat there is no band,
and the legend says so. Plain tables in: the study hands each role's tables over.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collectors.plots import (
    GB,
    _busbw_by_type,
    _empty,
    _fcts_by_type,
    _from_zero,
    new_figure,
    save_figure,
)
from collectors.tables import RunTables

FIG10, FIG11 = "seed_fig10_busbw.png", "seed_fig11_fct_cdf.png"
ALL_REDUCE, ALL_TO_ALL = "ALL_REDUCE", "ALL_TO_ALL"
TYPE_LABELS = {ALL_REDUCE: "All-Reduce", ALL_TO_ALL: "All-to-All"}
# Two-sided 95% quantiles of Student's t by degrees of freedom (any statistics table, e.g. NIST/
# SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2); above 30, the normal's 1.96.
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}
CDF_GRID_POINTS = 200


def t95(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (the nearest tabulated df at
    or below it: a slightly wider band, never a narrower one)."""
    if df < 1:
        raise ValueError("a t interval needs at least 2 repeats")
    if df > 30:
        return 1.96
    return T95[max(k for k in T95 if k <= df)]


def mean_band(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Column means of samples (repeats x points, NaN where a repeat has no value) and their 95%
    t band; the band is None where fewer than two repeats have a value (NaN there)."""
    counts = np.sum(~np.isnan(samples), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(samples, axis=0) if samples.size else np.empty(0)
        if samples.shape[0] < 2:
            return mean, None, None
        sd = np.nanstd(samples, axis=0, ddof=1)
    half = np.array(
        [
            t95(int(n) - 1) * s / math.sqrt(n) if n >= 2 else np.nan
            for n, s in zip(counts, sd, strict=True)
        ]
    )
    return mean, mean - half, mean + half


def _iteration_means(tables: RunTables, ctype: str) -> dict[int, float]:
    per_iter = _busbw_by_type(tables.collectives).get(ctype) or {}
    return {it: float(np.mean(v)) / GB for it, v in per_iter.items() if v}


def _band_label(repeats: int) -> str:
    return f"95% band over {repeats} repeats" if repeats >= 2 else "1 repeat: no band"


def _draw_busbw(ax: Any, runs: Sequence[RunTables], ctype: str, color: str | None = None) -> bool:
    per_run = [_iteration_means(t, ctype) for t in runs]
    its = sorted({it for r in per_run for it in r})
    if not its:
        return False
    samples = np.array([[r.get(it, np.nan) for it in its] for r in per_run], dtype=float)
    mean, low, high = mean_band(samples)
    label = f"{TYPE_LABELS.get(ctype, ctype)} (mean; {_band_label(len(runs))})"
    (line,) = ax.plot(its, mean, marker="o", ms=3, color=color, label=label)
    if low is not None and high is not None:
        ax.fill_between(its, low, high, color=line.get_color(), alpha=0.2, lw=0)
    return True


def plot_fig10_busbw(roles: Mapping[str, Sequence[RunTables]], path: Path) -> Path:
    """roles: "allreduce_only", "alltoall_only", "mixed" -> each repeat's tables."""
    fig = new_figure(15, 4.3)
    axes = fig.subplots(1, 3, sharey=True)
    panels = (
        ("allreduce_only", (ALL_REDUCE,), "(a) All-Reduce alone"),
        ("alltoall_only", (ALL_TO_ALL,), "(b) All-to-All alone"),
        ("mixed", (ALL_REDUCE, ALL_TO_ALL), "(c) mixed"),
    )
    colors = {ALL_REDUCE: "tab:blue", ALL_TO_ALL: "tab:orange"}
    for ax, (role, types, title) in zip(axes, panels, strict=True):
        runs = roles.get(role) or ()
        drawn = [_draw_busbw(ax, runs, ctype, colors[ctype]) for ctype in types]
        if any(drawn):
            ax.legend(fontsize="small")
            _from_zero(ax)
        else:
            _empty(ax, "completed collectives")
        ax.set_title(title)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("busbw (GB/s, nccl-tests)")
    fig.suptitle("Bus bandwidth per iteration (Chakra paper Fig. 10 form)")
    return save_figure(fig, path)


def cdf_band(
    per_run: Sequence[np.ndarray], grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Each repeat's empirical CDF at the grid points (fraction of its flows at or below), the
    pooled CDF and the 95% t band of the repeats' CDFs, clipped to [0, 1]."""
    cdfs = np.array(
        [np.searchsorted(np.sort(v), grid, side="right") / len(v) for v in per_run if len(v)]
    )
    pooled = np.sort(np.concatenate([v for v in per_run if len(v)]))
    pooled_cdf = np.searchsorted(pooled, grid, side="right") / len(pooled)
    _mean, low, high = mean_band(cdfs)
    if low is None or high is None:
        return pooled_cdf, None, None
    return pooled_cdf, np.clip(low, 0, 1), np.clip(high, 0, 1)


def plot_fig11_fct_cdf(roles: Mapping[str, Sequence[RunTables]], path: Path) -> Path:
    fig = new_figure(13, 4.5)
    axes = fig.subplots(1, 2)
    for ax, (ctype, alone_role) in zip(
        axes, ((ALL_REDUCE, "allreduce_only"), (ALL_TO_ALL, "alltoall_only")), strict=True
    ):
        sides = {
            "alone": [
                np.asarray(_fcts_by_type(t.flows).get(ctype, []), dtype=float)
                for t in roles.get(alone_role) or ()
            ],
            "mixed": [
                np.asarray(_fcts_by_type(t.flows).get(ctype, []), dtype=float)
                for t in roles.get("mixed") or ()
            ],
        }
        values = [v for runs in sides.values() for v in runs if len(v)]
        if not values:
            _empty(ax, "finished flows")
        else:
            every = np.concatenate(values)
            grid = np.geomspace(every.min(), every.max(), CDF_GRID_POINTS)
            for side, runs in sides.items():
                runs = [v for v in runs if len(v)]
                if not runs:
                    continue
                cdf, low, high = cdf_band(runs, grid)
                flows = sum(len(v) for v in runs)
                label = f"{side} ({flows} flows; {_band_label(len(runs))})"
                (line,) = ax.step(grid, cdf, where="post", label=label)
                if low is not None and high is not None:
                    ax.fill_between(
                        grid, low, high, step="post", color=line.get_color(), alpha=0.2, lw=0
                    )
            ax.set_xscale("log")
            ax.legend(fontsize="small", loc="lower right")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{TYPE_LABELS[ctype]}: FCT CDF, alone vs mixed")
        ax.set_xlabel("flow completion time (s, target timescale, log)")
        ax.set_ylabel("fraction of flows")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle("Flow completion times (Chakra paper Fig. 11 form)")
    return save_figure(fig, path)


def write_study_figures(roles: Mapping[str, Sequence[RunTables]], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [plot_fig10_busbw(roles, folder / FIG10), plot_fig11_fct_cdf(roles, folder / FIG11)]
