"""The load-balancing study's figures, over every judged repeat of each condition:

- lb_busbw.png: busbw mean per condition, one panel per collective type, each bar with its 95%
  bootstrap interval (the study's estimate, emulator.studies.load_balancing.analysis);
- lb_mmr.png: the links' max-to-mean load ratio per condition, one panel per link group, with
  its interval (a panel saying "not measured" when no run has load_balance);
- lb_fct_cdf.png: FCT CDF per condition, one panel per collective type, every repeat's flows
  pooled with the 95% t band of the repeats' CDFs (the interference study's cdf_band).

A bar without a value is not drawn and "n/m" is written where it would stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collectors.plots import _empty, new_figure, save_figure
from emulator.studies.interference.plots import CDF_GRID_POINTS, cdf_band
from emulator.studies.load_balancing.analysis import Analysis
from emulator.studies.load_balancing.runs import LbRun
from emulator.studies.stats.flags import judged_runs

BUSBW_PLOT, MMR_PLOT, FCT_PLOT = "lb_busbw.png", "lb_mmr.png", "lb_fct_cdf.png"


def _panels(count: int, height_in: float = 4.2) -> tuple[Any, list[Any]]:
    fig = new_figure(1.0 + 5.2 * max(1, count), height_in)
    axes = fig.subplots(1, max(1, count), squeeze=False)[0]
    return fig, list(axes)


def _bars(ax: Any, analysis: Analysis, metric: str, what: str, ylabel: str) -> None:
    names = list(analysis.conditions)
    points, lows, highs = [], [], []
    for name in names:
        cell = analysis.cell(name, metric, what)
        e = None if cell is None else cell.estimate
        point = None if e is None else e.point
        points.append(np.nan if point is None else point)
        low, high = (point, point) if e is None or e.interval is None else e.interval
        lows.append(0.0 if point is None or low is None else point - low)
        highs.append(0.0 if point is None or high is None else high - point)
    x = np.arange(len(names))
    ax.bar(x, points, yerr=[lows, highs], capsize=4, color=[f"C{i % 10}" for i in x])
    top = np.nanmax(np.array(points) + np.array(highs)) if np.any(~np.isnan(points)) else 1.0
    for i, value in enumerate(points):
        if np.isnan(value):
            ax.text(i, 0.02 * top, "n/m", ha="center", va="bottom")
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.1 if top > 0 else 1.0)
    ax.grid(alpha=0.3, axis="y")


def plot_busbw(analysis: Analysis, path: Path) -> Path:
    fig, axes = _panels(len(analysis.types))
    if not analysis.types:
        _empty(axes[0], "complete collective instances")
    for ax, ctype in zip(axes, analysis.types, strict=False):
        _bars(ax, analysis, "busbw_mean_GBps", ctype, "busbw mean (GB/s, nccl-tests)")
        ax.set_title(f"{ctype}: busbw per condition (95% CI)")
    return save_figure(fig, path)


def plot_mmr(analysis: Analysis, path: Path) -> Path:
    fig, axes = _panels(len(analysis.groups))
    if not analysis.groups:
        axes[0].text(
            0.5,
            0.5,
            "link balance not measured\n(no load_balance in the runs' summary.json)",
            ha="center",
            va="center",
            transform=axes[0].transAxes,
        )
    for ax, group in zip(axes, analysis.groups, strict=False):
        _bars(ax, analysis, "mmr", group, "max / mean link load (1: even)")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"{group}: link MMR per condition (95% CI)")
    return save_figure(fig, path)


def plot_fct_cdf(analysis: Analysis, runs: Sequence[LbRun], path: Path, everyone: bool) -> Path:
    fig, axes = _panels(len(analysis.types), 4.5)
    if not analysis.types:
        _empty(axes[0], "finished flows")
    for ax, ctype in zip(axes, analysis.types, strict=False):
        per_condition = {
            name: [
                r.of(ctype).fct
                for r in judged_runs([r for r in runs if r.condition == name], everyone)
                if len(r.of(ctype).fct)
            ]
            for name in analysis.conditions
        }
        values = [v for fcts in per_condition.values() for v in fcts]
        positive = np.concatenate(values) if values else np.empty(0)
        positive = positive[positive > 0]
        if not len(positive):
            _empty(ax, "finished flows")
            continue
        grid = np.geomspace(positive.min(), positive.max(), CDF_GRID_POINTS)
        for name, fcts in per_condition.items():
            if not fcts:
                continue
            cdf, low, high = cdf_band(fcts, grid)
            label = f"{name} ({sum(len(v) for v in fcts)} flows, {len(fcts)} repeats)"
            (line,) = ax.step(grid, cdf, where="post", label=label)
            if low is not None and high is not None:
                ax.fill_between(grid, low, high, step="post", color=line.get_color(), alpha=0.15)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{ctype}: FCT CDF per condition")
        ax.set_xlabel("flow completion time (s, target timescale, log)")
        ax.set_ylabel("fraction of flows")
        ax.legend(fontsize="small", loc="lower right")
        ax.grid(alpha=0.3, which="both")
    return save_figure(fig, path)


def write_study_figures(
    analysis: Analysis, runs: Sequence[LbRun], folder: Path, include_flagged: bool = False
) -> list[Path]:
    from collectors.results import DIR_MODE, make_private

    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    plots = [
        plot_busbw(analysis, folder / BUSBW_PLOT),
        plot_mmr(analysis, folder / MMR_PLOT),
        plot_fct_cdf(analysis, runs, folder / FCT_PLOT, include_flagged),
    ]
    make_private(folder)
    return plots
