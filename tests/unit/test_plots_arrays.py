"""The sample plots read the tables as arrays (collectors/plots.py `_grouped`), not a tuple per
row: what they draw is still each port's and each rank's samples in time order, the deepest
ports by name, whatever order the rows come in (engine workers sample at their own instants)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import collectors.plots as plots
from collectors.samples import NicRow, PortRow
from collectors.tables import RunTables


def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the plots would save."""
    figures: list[Any] = []

    def keep(fig: Any, path: Path, tight: bool = True) -> Path:
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


def test_the_deepest_ports_in_name_order_each_in_time_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rng = random.Random(3)
    # port p's queue peaks at 1000 * p bytes; ports 0, 1 and 2 are the shallowest
    rows = [
        PortRow(t * 1e-3, "leaf", f"p{p:02d}", 0, 0, 0, 0, (t % 4) * 250 * p, 0, 0.0, 0.0)
        for p in range(11)
        for t in range(12)
    ]
    rng.shuffle(rows)
    figures = drawn(monkeypatch)
    plots.plot_switch_queue(RunTables.from_rows(ports=rows), tmp_path / "q.png", "t")
    (ax,) = figures[0].axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == [f"leaf:p{p:02d}" for p in range(3, 11)]
    for line in lines:
        p = int(line.get_label()[-2:])
        assert list(line.get_xdata()) == [t * 1e-3 for t in range(12)]
        assert list(line.get_ydata()) == [(t % 4) * 250 * p / 1e3 for t in range(12)]
    assert "deepest 8 of 11 ports" in ax.get_legend().get_title().get_text()


def test_one_strip_per_rank_with_its_cells_in_time_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rng = random.Random(5)
    rows = [
        NicRow(t * 1e-3 + rank * 1e-5, rank, d, 0, 0, 1e-3, (t + rank) / 20)
        for rank in (4, 0, 2)
        for d in ("tx", "rx")
        for t in range(1, 6)
    ]
    rng.shuffle(rows)
    figures = drawn(monkeypatch)
    plots.plot_nic_heatmap(RunTables.from_rows(nic=rows), tmp_path / "n.png", "t")
    tx = figures[0].axes[0]
    assert [label.get_text() for label in tx.get_yticklabels()] == ["0", "2", "4"]
    for i, rank in enumerate((0, 2, 4)):
        mesh = tx.collections[i]
        assert list(mesh.get_array().ravel()) == [(t + rank) / 20 for t in range(1, 6)]
        edges = mesh.get_coordinates()[0, :, 0]
        assert list(edges) == pytest.approx([rank * 1e-5 + t * 1e-3 for t in range(0, 6)])
