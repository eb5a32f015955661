"""The shipped Grafana dashboard against real data: a real Prometheus scrapes the exporter of a
real run (a small MoE step on an emulated namespace Clos with the eBPF marker, one-way latency
on, ECN thresholds low enough that both collectives are marked), then every panel's every query
goes to Prometheus's HTTP API as Grafana would send it (its variables substituted; a time-series
panel as a range query over the run, a table or bar gauge as an instant query at its end). Each
must return data, and each series must carry the labels its legend names. A panel that returns
nothing fails. The template variable's label values are there too, and the verdict panel shows
the run's final verdict (metrics.prometheus.linger_s keeps it served for the last scrapes).

No Grafana server package is reachable here; the dashboard's JSON against Grafana's own schema
and its PromQL against the parser are unit tests (tests/unit/test_collectors_grafana.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from tests.system.prereq import require
from tests.system.prometheus_server import (
    PROMETHEUS,
    SCRAPE_INTERVAL_S,
    PrometheusServer,
    free_port,
    get_json,
    wait_until,
)
from tests.unit.test_collectors_grafana import dashboard, panels, substituted

pytestmark = pytest.mark.system

LINGER_S = 3.0  # the run serves its final metrics this long: six scrapes

SCENARIO = """\
name: grafana_proof
workload:
  generate:
    kind: moe_mix
    ranks: 4
    expert_parallel_size: 2
    dispatch_bytes: 1048576
    allreduce_bytes: 4194304
    iterations: 3
    overlap: true
fabric:
  kind: clos
  hosts_per_leaf: 2
  leaves: 2
  spines: 1
  host_link_gbps: 400
  fabric_link_gbps: 400
  marker: ebpf
  leaf: {{ecn: {{kmin_bytes: 4000, kmax_bytes: 40000, pmax: 0.5}}}}
  spine: {{ecn: {{kmin_bytes: 4000, kmax_bytes: 40000, pmax: 0.5}}}}
transport:
  congestion_control: dcqcn
  path_mtu_bytes: 4096
metrics:
  sample_interval_s: 0.05
  one_way_latency: "on"
  prometheus: {{port: {port}, linger_s: {linger}}}
run:
  time_dilation: 2000
"""

LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def test_every_panel_returns_data_from_a_real_run(fabric_env: str, tmp_path: Path) -> None:
    if not PROMETHEUS.is_file():
        require("system test needs /usr/bin/prometheus (run ./setup.sh)")
    port = free_port()
    server = PrometheusServer(tmp_path, port)
    try:
        wait_until(
            "prometheus ready", lambda: get_json(f"{server.base}/api/v1/status/buildinfo"), 20
        )
        path = tmp_path / "scenario.yaml"
        path.write_text(SCENARIO.format(port=port, linger=LINGER_S))
        start_s = time.time()
        result = run_scenario(
            load_scenario(path),
            RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env),
        )
        end_s = time.time()
        assert not result.partial
        verdict = result.summary["fidelity"]["verdict"]
        # the last scrapes are in the database before anything is asked of it
        wait_until(
            "the run's last scrapes",
            lambda: server.query_range(
                'emulator_fidelity_verdict{verdict!="running"}',
                start_s,
                end_s,
                SCRAPE_INTERVAL_S,
            ),
            15,
        )
        board = dashboard()
        empty: list[str] = []
        for panel in panels(board):
            for target in panel["targets"]:
                expr = substituted(target["expr"], board)
                if target.get("instant"):
                    # a table's or a bar gauge's: as Grafana shows it at the run's end
                    series = server.query_at(expr, end_s - LINGER_S / 2)
                else:
                    series = server.query_range(expr, start_s, end_s, SCRAPE_INTERVAL_S)
                if not series:
                    empty.append(f"{panel['title']!r}: {expr}")
                    continue
                wanted = set(LEGEND_LABEL.findall(target.get("legendFormat", "")))
                for one in series:
                    missing = wanted - set(one["metric"])
                    assert not missing, (
                        f"panel {panel['title']!r}: {expr} returned a series without the "
                        f"labels {sorted(missing)} its legend names: {one['metric']}"
                    )
        assert not empty, "panels that returned nothing from the run:\n" + "\n".join(empty)

        for var in board["templating"]["list"]:
            metric, label = re.findall(r"label_values\((\w+),\s*(\w+)\)", var["query"]["query"])[0]
            values = get_json(
                f"{server.base}/api/v1/label/{label}/values?match[]={metric}"
                f"&start={start_s}&end={end_s}"
            )["data"]
            assert set(values) >= {"ALL_REDUCE", "ALL_TO_ALL"}, (var["name"], values)

        # the verdict panel ends on the run's own verdict, not "running"
        (final,) = server.query_at('emulator_fidelity_verdict{server="all"} == 1', end_s - 1.0)
        assert final["metric"]["verdict"] == verdict
    finally:
        server.stop()
    assert server.proc.returncode is not None
