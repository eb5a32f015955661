"""The shipped Grafana dashboard only queries metrics the exporter really emits, and its
provisioning files point at the same data source."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.live import RunInfo
from collectors.prometheus import make_registry
from collectors.recorder import RunRecorder
from emulator.events import PortSample
from emulator.latency import LatencyHistogram
from tests.synthetic_run import synthetic_run

GRAFANA = Path(__file__).resolve().parents[2] / "collectors" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "emulator.json"

# PromQL words that are not metric names when they appear bare.
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
}
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords, label
    names inside {...} or by(...), durations in [...] or strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in IDENT.finditer(text):
        word = match.group()
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or word in KEYWORDS or word.startswith("$"):
            continue
        if text[: match.start()].endswith("$"):  # $__rate_interval and friends
            continue
        names.add(word)
    return names


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, collective_type) "
        '(rate(emulator_flow_completion_time_seconds_bucket{collective_type=~"$t"}[$__rate_interval])))'
        " / on(rank) group_left emulator_x_total"
    )
    assert metric_names(expr) == {
        "emulator_flow_completion_time_seconds_bucket",
        "emulator_x_total",
    }


def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return [p for p in out if p["type"] != "row"]


@pytest.fixture(scope="module")
def emitted() -> set[str]:
    run = synthetic_run(ranks=4, iterations=2)
    rec = RunRecorder(
        run.flows, run.collectives, RunInfo("s", 10.0, "phantom", "clos"), run.line_rate_bps
    )
    rec.on_events(run.events)
    latency = LatencyHistogram()  # what a run's engine reports per class (one-way latency)
    latency.observe(2e-6)
    rec.live.latency_source = lambda: {26: latency}
    # a Clos's leaf uplinks, sampled twice (the tier group's MMR and JFI need a load)
    rec.on_events(
        [
            PortSample(t, "l0", f"l0-s{s}", sent, sent // 4096, 0, 0, 0)
            for t, scale in ((1.0, 0), (2.0, 1))
            for s, sent in ((0, 4_000_000 * scale), (1, 1_000_000 * scale))
        ]
    )
    # the tester's per-rank counters, as the run hands them over at the end
    rec.live.queue_pair_source = lambda: {
        "0": {"reordered_packets": 3, "held_out_of_order": 2, "sacks_sent": 1, "sacks_received": 0}
    }
    text = generate_latest(make_registry(rec.live)).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_panel_queries_only_emitted_metrics(emitted: set[str]) -> None:
    board = dashboard()
    queried: set[str] = set()
    for panel in panels(board):
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        assert exprs, f"panel {panel['title']!r} has no query"
        for expr in exprs:
            names = metric_names(expr)
            assert names, f"panel {panel['title']!r}: no metric in {expr!r}"
            missing = names - emitted
            assert not missing, f"panel {panel['title']!r} queries {sorted(missing)} not emitted"
            queried |= names
    for var in board["templating"]["list"]:
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        (metric,) = re.findall(r"label_values\((\w+)", query)
        assert metric in emitted
    # The panels the issue asks for are there.
    for needed in (
        "emulator_collective_busbw_bytes_per_second",
        "emulator_flow_completion_time_seconds_bucket",
        "emulator_nic_utilization_ratio",
        "emulator_cnps_sent_total",
        "emulator_ce_marked_packets_total",
        "emulator_switch_port_queue_bytes",
        "emulator_switch_port_ecn_marked_packets_total",
        "emulator_switch_tier_group_load_max_to_mean_ratio",
        "emulator_switch_tier_group_load_jain_fairness_ratio",
        "emulator_reordered_packets_total",
    ):
        assert needed in queried


def test_panels_have_titles_units_and_the_provisioned_datasource() -> None:
    board = dashboard()
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "emulator.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    for panel in panels(board):
        assert panel["title"]
        assert panel["datasource"]["uid"] == source["uid"]
        if panel["type"] != "table":
            assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
    kinds = {p["type"] for p in panels(board)}
    assert {"heatmap", "timeseries", "bargauge"} <= kinds
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_provider_points_at_the_dashboards_folder() -> None:
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "emulator.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    assert DASHBOARD.parent.name == "dashboards"
