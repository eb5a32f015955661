"""The shipped Grafana dashboard only queries metrics the exporter really emits, and its
provisioning files point at the same data source."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.attribution import AttributionRow, share_of
from collectors.live import RunInfo
from collectors.prometheus import make_registry
from collectors.recorder import RunRecorder
from emulator.events import PortSample
from emulator.latency import LatencyHistogram
from tests.synthetic_run import synthetic_run

GRAFANA = Path(__file__).resolve().parents[2] / "collectors" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "emulator.json"

# What Grafana puts in a query before Prometheus sees it: the dashboard's own variables (every
# one must be listed here or in its templating) and the built-in intervals.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "15m",
}
VARIABLE = re.compile(r"\$(?:\{)?(__\w+|\w+)")


def substituted(expr: str, board: dict[str, Any]) -> str:
    """The query as Prometheus receives it: built-ins by a typical interval, each template
    variable by its 'All' value (a regex matching anything, as Grafana sends $__all)."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    for var in board["templating"]["list"]:
        expr = expr.replace(f"${{{var['name']}}}", ".*").replace(f"${var['name']}", ".*")
    left = VARIABLE.findall(expr)
    assert not left, f"unknown Grafana variable(s) {left} in {expr!r}"
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects, from promql-parser's syntax tree."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit, None)
    return names


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, collective_type) "
        '(rate(emulator_flow_completion_time_seconds_bucket{collective_type=~".*"}[1m])))'
        " / on(rank) group_left emulator_x_total"
    )
    assert metric_names(expr) == {
        "emulator_flow_completion_time_seconds_bucket",
        "emulator_x_total",
    }


def test_a_query_that_does_not_parse_is_caught() -> None:
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(emulator_x_total[1m])")
    with pytest.raises(ValueError):  # Grafana's variables must be substituted first
        promql_parser.parse("rate(emulator_x_total[$__rate_interval])")
    with pytest.raises(AssertionError, match="unknown Grafana variable"):
        substituted('rate(emulator_x_total{a=~"$nope"}[1m])', {"templating": {"list": []}})


def queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL as Prometheus receives it) for every panel's every query, and the
    templating variables' metric queries."""
    out = [
        (panel["title"], substituted(t["expr"], board))
        for panel in panels(board)
        for t in panel.get("targets", [])
        if t.get("expr")
    ]
    for var in board["templating"]["list"]:
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        (metric,) = re.findall(r"label_values\((\w+)", query)
        out.append((f"variable {var['name']}", metric))
    return out


def test_every_query_parses_as_promql() -> None:
    """promql-parser (the Rust parser Prometheus-compatible servers use) accepts every query
    after Grafana's substitutions, and each selects at least one metric."""
    for title, expr in queries(dashboard()):
        try:
            tree = promql_parser.parse(expr)
        except ValueError as exc:
            raise AssertionError(f"panel {title!r}: {expr!r} does not parse: {exc}") from exc
        assert metric_names(expr), f"panel {title!r}: no metric in {tree}"


def test_the_dashboard_decodes_with_grafanas_schema() -> None:
    """grafana-foundation-sdk (the dashboard model generated from Grafana's own schema) reads
    the JSON and writes back every key it was given: nothing unknown to Grafana, nothing it
    would drop."""
    register_default_plugins()
    source = dashboard()
    decoded = Dashboard.from_json(source)
    back = json.loads(json.dumps(decoded, cls=JSONEncoder))
    assert dropped(source, back) == []
    assert len(decoded.panels or []) == len(source["panels"])


def dropped(given: Any, back: Any, path: str = "") -> list[str]:
    """Where `back` lost or changed something `given` had (keys it adds are defaults)."""
    if isinstance(given, dict):
        if not isinstance(back, dict):
            return [f"{path}: {type(back).__name__} instead of an object"]
        out: list[str] = []
        for key, value in given.items():
            out += (
                [f"{path}.{key}: dropped"]
                if key not in back
                else dropped(value, back[key], f"{path}.{key}")
            )
        return out
    if isinstance(given, list):
        if not isinstance(back, list) or len(back) != len(given):
            return [f"{path}: list changed"]
        return [
            d
            for i, (g, b) in enumerate(zip(given, back, strict=True))
            for d in dropped(g, b, f"{path}[{i}]")
        ]
    return [] if given == back else [f"{path}: {given!r} became {back!r}"]


def test_the_schema_check_catches_a_key_grafana_does_not_know() -> None:
    register_default_plugins()
    board = dashboard()
    board["panels"][1]["fancyOption"] = 1
    back = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    assert dropped(board, back) == [".panels[1].fancyOption: dropped"]


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
    # who held the queues (collectors.attribution's rows), the CPU of this machine and of a
    # cluster's servers (a run has one or the other)
    rec.live.add_attribution(
        [
            share_of(
                AttributionRow(
                    1.0,
                    1.0,
                    "l0",
                    "l0-s0",
                    3,
                    "ALL_TO_ALL",
                    0,
                    8192,
                    1,
                    0,
                    queue_byte_s=0.5,
                    pause_s=0.1,
                )
            )
        ]
    )
    rec.live.port_pause[("l0", "l0-s0")] = [1e-6, 1.0]
    rec.live.cpu_busy_ratio = 0.5
    rec.live.cpu_busy_by_server = {"driver": 0.4}
    text = generate_latest(make_registry(rec.live)).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_panel_queries_only_emitted_metrics(emitted: set[str]) -> None:
    board = dashboard()
    queried: set[str] = set()
    for panel in panels(board):
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        assert exprs, f"panel {panel['title']!r} has no query"
        for expr in exprs:
            names = metric_names(substituted(expr, board))
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
        "emulator_switch_port_collective_queue_byte_seconds_total",
        "emulator_switch_port_collective_ecn_marked_packets_total",
        "emulator_switch_port_collective_pfc_equivalent_pause_seconds_total",
        "emulator_switch_port_pfc_equivalent_pause_seconds_total",
        "emulator_switch_port_pfc_equivalent_pauses_total",
        "emulator_fidelity_verdict",
        "emulator_server_cpu_busy_ratio",
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
