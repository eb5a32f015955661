"""The sensitivity study's figure (the Chakra paper's Fig. 7): slowdown per collective type and
link rate as grouped bars, with the bandwidth-bound expectation (the rate ratio) drawn across
each bar and the congestion-free plan's own slowdown as a marker on it.

Headless, through collectors.plots' figure helpers; plain data in, so
the module knows nothing of the study's types.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from collectors.plots import new_figure, save_figure

BAR_GROUP_WIDTH = 0.8  # of the space between two collective types


def write_slowdown_plot(
    path: Path,
    groups: Sequence[str],
    rates_gbps: Sequence[float],
    slowdowns: Sequence[Sequence[float | None]],
    expected: Sequence[float],
    plan: Sequence[Sequence[float | None]],
    reference_gbps: float,
) -> Path:
    """slowdowns[g][i], plan[g][i]: group g (a collective type, or the job) at rates_gbps[i]
    (the rates other than the reference); expected[i]: reference_gbps / rates_gbps[i]. None: not
    measured (no bar, "n/m" written where it would be)."""
    top = max([1.0, *expected, *(v for row in slowdowns for v in row if v is not None)]) * 1.1
    fig = new_figure(3.0 + 1.6 * len(groups) * max(1, len(rates_gbps)) ** 0.5, 4.5)
    ax = fig.add_subplot()
    width = BAR_GROUP_WIDTH / max(1, len(rates_gbps))
    colors = [f"C{i % 10}" for i in range(len(rates_gbps))]
    for i, (rate, k, color) in enumerate(zip(rates_gbps, expected, colors, strict=True)):
        offset = (i - (len(rates_gbps) - 1) / 2) * width
        for g in range(len(groups)):
            x = g + offset
            value = slowdowns[g][i]
            label = f"{rate:g} Gb/s" if g == 0 else None
            if value is None:
                ax.text(x, 0.05, "n/m", ha="center", va="bottom", fontsize=8)
            else:
                ax.bar(x, value, width * 0.9, color=color, label=label)
                # Inside the bar, clear of the expectation line and the plan marker above it.
                inside = value > 0.15 * top
                ax.text(
                    x,
                    value / 2 if inside else value,
                    f"{value:.2f}x",
                    ha="center",
                    va="center" if inside else "bottom",
                    fontsize=8,
                    color="white" if inside else "black",
                )
            # The expectation across the bar, the same for every type at this rate.
            ax.hlines(k, x - width * 0.45, x + width * 0.45, colors="black", linestyles="dashed")
            planned = plan[g][i]
            if planned is not None:
                ax.plot([x], [planned], marker="D", color="black", markersize=4, linestyle="")
    ax.plot([], [], color="black", linestyle="dashed", label="rate ratio (bandwidth-bound)")
    ax.plot(
        [], [], marker="D", color="black", markersize=4, linestyle="", label="plan (no congestion)"
    )
    ax.axhline(1.0, color="grey", linewidth=0.8, zorder=0)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(f"slowdown vs {reference_gbps:g} Gb/s (x)")
    ax.set_title(
        f"Time per collective type at lower link rates, relative to {reference_gbps:g} Gb/s"
    )
    ax.set_ylim(0, top)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never on a bar
    return save_figure(fig, path)
