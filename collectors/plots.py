"""The results folder's figures, rendered headless (matplotlib Agg) as PNG.

One run: busbw per iteration per collective type, FCT CDF per collective type (log x), NIC
utilization heatmap (rank x time), switch queue over time. Several runs (`emulate compare`):
busbw per iteration overlaid and FCT CDFs overlaid, one panel per collective type, and CNPs
per collective type side by side. Every figure
has a title, axis labels with units and a legend; an empty table gives a figure saying so rather
than no file. Times are in the target timescale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from collectors.attribution import congested_ports
from collectors.tables import RunTables, rows

GB = 1e9
DPI = 110
MAX_PORT_LINES = 8
ATTRIBUTION_PLOT = "attribution_queue.png"


def new_figure(width_in: float, height_in: float) -> Figure:
    # The object API with an Agg canvas: no pyplot global state, no display needed.
    fig = Figure(figsize=(width_in, height_in))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: Path, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    # a figure's artists are reference cycles: without this their data (a large run's CDFs
    # and heatmap cells, tens of MB) stayed until the collector came by, across the next plots
    fig.clear()
    return path


def _from_zero(ax: Any) -> None:
    """Y axis from 0 with headroom, so the highest point is not drawn on the frame."""
    ax.set_ylim(0, ax.get_ylim()[1] * 1.08)


def _empty(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} recorded", ha="center", va="center", transform=ax.transAxes)


def _busbw_by_type(collectives: pa.Table) -> dict[str, dict[int, list[float]]]:
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ctype, iteration, busbw, complete in rows(
        collectives, ("collective_type", "iteration", "busbw_bytes_per_s", "complete")
    ):
        if complete and busbw is not None:
            out[ctype][iteration].append(busbw)
    return out


def _fcts_by_type(flows: pa.Table) -> dict[str, list[float]]:
    out: dict[str, list[float]] = defaultdict(list)
    for ctype, fct in rows(flows, ("collective_type", "fct_s")):
        if fct is not None and fct > 0:
            out[ctype].append(fct)
    return out


def _cdf(values: Sequence[float]) -> tuple[Any, Any]:
    x = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, len(x) + 1) / len(x)
    return x, y


def plot_busbw_per_iteration(tables: RunTables, path: Path, title: str) -> Path:
    fig = new_figure(8, 4.5)
    ax = fig.subplots()
    data = _busbw_by_type(tables.collectives)
    ideal: dict[str, list[float]] = defaultdict(list)
    for ctype, value in rows(tables.collectives, ("collective_type", "ideal_busbw_bytes_per_s")):
        if value is not None:
            ideal[ctype].append(value)
    for ctype in sorted(data):
        per_iter = data[ctype]
        its = sorted(per_iter)
        xs = [it for it in its for _ in per_iter[it]]
        ys = [v / GB for it in its for v in per_iter[it]]
        (line,) = ax.plot(
            its, [np.mean(per_iter[it]) / GB for it in its], marker="o", label=f"{ctype} (mean)"
        )
        ax.scatter(xs, ys, s=10, alpha=0.35, color=line.get_color())
        if ideal.get(ctype):
            ax.axhline(
                float(np.mean(ideal[ctype])) / GB,
                ls="--",
                lw=1,
                color=line.get_color(),
                label=f"{ctype} ideal",
            )
    if not data:
        _empty(ax, "completed collectives")
    else:
        ax.legend(fontsize="small")
        _from_zero(ax)
    ax.set_title(f"Bus bandwidth per iteration — {title}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("busbw (GB/s, nccl-tests)")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_fct_cdf(tables: RunTables, path: Path, title: str) -> Path:
    fig = new_figure(8, 4.5)
    ax = fig.subplots()
    data = _fcts_by_type(tables.flows)
    for ctype in sorted(data):
        x, y = _cdf(data[ctype])
        ax.step(x, y, where="post", label=f"{ctype} ({len(x)} flows)")
    if data:
        ax.set_xscale("log")
        ax.legend(fontsize="small")
    else:
        _empty(ax, "finished flows")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Flow completion time CDF — {title}")
    ax.set_xlabel("flow completion time (s, target timescale, log)")
    ax.set_ylabel("fraction of flows")
    ax.grid(alpha=0.3, which="both")
    return save_figure(fig, path)


def _grouped(keys: np.ndarray, *by: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by integer `keys` (ascending), each group's rows sorted by `by` (the first
    most significant, as sorting tuples would): the row order, each group's key, and each
    group's start in that order (one more: the end). Arrays, not a tuple per row: a large
    fabric's samples are millions of rows."""
    order = np.lexsort((*reversed(by), keys))
    ordered = keys[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(order) else order
    return order, ordered[starts], np.r_[starts, len(order)]


def plot_nic_heatmap(tables: RunTables, path: Path, title: str) -> Path:
    fig = new_figure(9, 6)
    axes = fig.subplots(2, 1, sharex=True)
    nic = tables.nic
    image = None
    for ax, direction in zip(axes, ("tx", "rx"), strict=True):
        mine = nic.filter(pc.equal(nic.column("direction"), direction))
        ax.set_title(f"NIC {direction} utilization — {title}")
        ax.set_ylabel("rank")
        if not mine.num_rows:
            _empty(ax, f"{direction} samples")
            continue
        t, interval, u = (
            mine.column(n).to_numpy() for n in ("time_s", "interval_s", "utilization")
        )
        order, ranks, bounds = _grouped(mine.column("rank").to_numpy(), t, interval, u)
        # One strip per rank with its own sample times: ranks served by different engine
        # workers are sampled at different instants. A cell spans the interval it measured.
        for i in range(len(ranks)):
            cells = order[bounds[i] : bounds[i + 1]]
            edges = np.concatenate(([t[cells[0]] - interval[cells[0]]], t[cells]))
            image = ax.pcolormesh(
                edges, [i - 0.5, i + 0.5], u[cells][None, :], vmin=0.0, vmax=1.0, cmap="viridis"
            )
        ax.set_ylim(-0.5, len(ranks) - 0.5)
        ax.set_yticks(range(len(ranks)), [str(r) for r in ranks.tolist()])
    axes[-1].set_xlabel("time (s, target timescale)")
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="utilization (share of line rate)")
        # A colorbar spanning several axes and tight_layout do not mix.
        return save_figure(fig, path, tight=False)
    return save_figure(fig, path)


def plot_switch_queue(tables: RunTables, path: Path, title: str) -> Path:
    fig = new_figure(9, 4.5)
    ax = fig.subplots()
    ports = tables.ports
    names: list[str] = []
    if ports.num_rows:
        # each row's "switch:port", numbered in order of first appearance
        joined = pc.binary_join_element_wise(ports.column("switch"), ports.column("port"), ":")
        encoded = pc.dictionary_encode(joined.combine_chunks())
        names = encoded.dictionary.to_pylist()
        t = ports.column("time_s").to_numpy()
        queue = ports.column("queue_bytes").to_numpy()
        # the dictionary holds only names that occur: group k is port number k
        order, _, bounds = _grouped(encoded.indices.to_numpy(), t, queue)
        deepest = np.maximum.reduceat(queue[order], bounds[:-1])
        # the deepest ports (ties in order of first appearance), shown in name order
        ranked = sorted(range(len(names)), key=lambda k: deepest[k], reverse=True)
        shown = sorted(ranked[:MAX_PORT_LINES], key=lambda k: names[k])
        for k in shown:
            points = order[bounds[k] : bounds[k + 1]]
            ax.plot(t[points], queue[points] / 1e3, label=names[k])
        more = f" (deepest {len(shown)} of {len(names)} ports)" if len(names) > len(shown) else ""
        ax.legend(
            fontsize="small", title=f"switch:port{more}", loc="upper left", bbox_to_anchor=(1.01, 1)
        )
        _from_zero(ax)
    else:
        _empty(ax, "switch port samples")
    ax.set_title(f"Switch egress queue — {title}")
    ax.set_xlabel("time (s, target timescale)")
    ax.set_ylabel("queue (KB)")
    ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_attribution(tables: RunTables, path: Path, title: str) -> Path:
    """Stacked queue occupancy by collective type over time at the most congested ports (the
    most queue byte-time): who held the queues that marked whom. Each window shows the mean
    queue over it (its byte-time over its length; the window-end bytes where a row has no
    byte-time)."""
    ports = congested_ports(tables.attribution) or [("", "")]
    fig, axes = _grid(len(ports))
    kinds = sorted(set(tables.attribution.column("collective_type").to_pylist()))
    names = ("time_s", "switch", "port", "collective_type", "queue_bytes", "interval_s")
    attribution = tables.attribution
    for ax, (switch, port) in zip(axes, ports, strict=True):
        held: dict[float, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # this port's rows only, as Python tuples (a large run has 100k+ rows in all)
        mine = attribution.filter(
            pc.and_(
                pc.equal(attribution.column("switch"), switch),
                pc.equal(attribution.column("port"), port),
            )
        )
        for t, _, _, kind, queued, interval, byte_s in rows(mine, (*names, "queue_byte_s")):
            mean = byte_s / interval if byte_s is not None and interval else queued
            held[t][kind] += mean
        if not held:
            _empty(ax, "attributed queue")
            continue
        times = sorted(held)
        stack = [[held[t].get(k, 0) / 1e3 for t in times] for k in kinds]
        ax.stackplot(times, *stack, labels=kinds, step="pre")
        ax.set_title(f"{switch}:{port}", fontsize="medium")
        ax.set_xlabel("time (s, target timescale)")
        ax.set_ylabel("mean queue in the window (KB)")
        ax.legend(fontsize="small", title="held by", loc="upper right")
        ax.grid(alpha=0.3)
        _from_zero(ax)
    fig.suptitle(f"Queue by collective at the most congested ports — {title}")
    return save_figure(fig, path)


# File name -> renderer of one run's figure.
RUN_PLOTS: dict[str, Callable[[RunTables, Path, str], Path]] = {
    "busbw_per_iteration.png": plot_busbw_per_iteration,
    "fct_cdf.png": plot_fct_cdf,
    "nic_utilization_heatmap.png": plot_nic_heatmap,
    "switch_queue.png": plot_switch_queue,
}


def render_run_plots(tables: RunTables, folder: Path, title: str) -> list[Path]:
    folder.mkdir(mode=0o700, exist_ok=True)
    out = [render(tables, folder / name, title) for name, render in RUN_PLOTS.items()]
    if tables.attribution_measured:  # only a backend that tags packets measures it
        out.append(plot_attribution(tables, folder / ATTRIBUTION_PLOT, title))
    return out


def _grid(n: int) -> tuple[Figure, list[Any]]:
    cols = min(n, 2)
    nrows = (n + cols - 1) // cols
    fig = new_figure(6.5 * cols, 4.2 * nrows)
    axes = fig.subplots(nrows, cols, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def plot_compare_busbw(runs: Sequence[tuple[str, RunTables]], path: Path) -> Path:
    per_run = [(label, _busbw_by_type(t.collectives)) for label, t in runs]
    types = sorted({ctype for _, data in per_run for ctype in data}) or ["(none)"]
    fig, axes = _grid(len(types))
    for ax, ctype in zip(axes, types, strict=True):
        drawn = False
        for label, data in per_run:
            per_iter = data.get(ctype)
            if not per_iter:
                continue
            its = sorted(per_iter)
            ax.plot(its, [np.mean(per_iter[i]) / GB for i in its], marker="o", label=label)
            drawn = True
        if drawn:
            ax.legend(fontsize="small", title="run")
            _from_zero(ax)
        else:
            _empty(ax, "completed collectives")
        ax.set_title(f"{ctype}: busbw per iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("iteration")
        ax.set_ylabel("mean busbw (GB/s, nccl-tests)")
        ax.grid(alpha=0.3)
    return save_figure(fig, path)


def plot_compare_fct_cdf(runs: Sequence[tuple[str, RunTables]], path: Path) -> Path:
    per_run = [(label, _fcts_by_type(t.flows)) for label, t in runs]
    types = sorted({ctype for _, data in per_run for ctype in data}) or ["(none)"]
    fig, axes = _grid(len(types))
    for ax, ctype in zip(axes, types, strict=True):
        drawn = False
        for label, data in per_run:
            if data.get(ctype):
                x, y = _cdf(data[ctype])
                ax.step(x, y, where="post", label=f"{label} ({len(x)} flows)")
                drawn = True
        if drawn:
            ax.set_xscale("log")
            ax.legend(fontsize="small", title="run")
        else:
            _empty(ax, "finished flows")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{ctype}: flow completion time CDF")
        ax.set_xlabel("flow completion time (s, target timescale, log)")
        ax.set_ylabel("fraction of flows")
        ax.grid(alpha=0.3, which="both")
    return save_figure(fig, path)


def plot_compare_cnps(runs: Sequence[tuple[str, RunTables]], path: Path) -> Path:
    """CNPs sent by receivers, per collective type, one bar per run."""
    per_run: list[tuple[str, dict[str, int]]] = []
    for label, tables in runs:
        counts: dict[str, int] = defaultdict(int)
        for ctype, cnps in rows(tables.flows, ("collective_type", "cnps_sent")):
            counts[ctype] += cnps
        per_run.append((label, counts))
    types = sorted({ctype for _, counts in per_run for ctype in counts})
    fig = new_figure(max(6.5, 1.6 * len(types) * max(1, len(runs))), 4.5)
    ax = fig.subplots()
    width = 0.8 / max(1, len(per_run))
    for i, (label, counts) in enumerate(per_run):
        xs = [j + (i - (len(per_run) - 1) / 2) * width for j in range(len(types))]
        ax.bar(xs, [counts.get(t, 0) for t in types], width=width, label=label)
    if types:
        ax.set_xticks(range(len(types)), types)
        ax.legend(fontsize="small", title="run")
    else:
        _empty(ax, "flows")
    ax.set_title("CNPs per collective type")
    ax.set_xlabel("collective type")
    ax.set_ylabel("CNPs sent (count)")
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, path)


COMPARE_PLOTS: dict[str, Callable[[Sequence[tuple[str, RunTables]], Path], Path]] = {
    "compare_busbw_per_iteration.png": plot_compare_busbw,
    "compare_fct_cdf.png": plot_compare_fct_cdf,
    "compare_cnps.png": plot_compare_cnps,
}
