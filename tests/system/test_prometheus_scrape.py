"""A real Prometheus server (Debian package `prometheus`) on loopback scrapes the exporter while a
short synthetic run is fed in; its HTTP query API must then show the key series with the values
the recorder computed. Prometheus gets a temporary data dir and is stopped by its process handle.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.live import RunInfo
from collectors.prometheus import Exporter, make_registry
from collectors.recorder import RunRecorder
from tests.synthetic_run import synthetic_run
from tests.system.prereq import require
from tests.system.prometheus_server import PROMETHEUS, PrometheusServer, get_json, wait_until

FEED_CHUNKS = 24  # the run is fed over FEED_CHUNKS x FEED_PAUSE_S of wall-clock time
FEED_PAUSE_S = 0.125

pytestmark = pytest.mark.system


@pytest.fixture
def exporter_and_recorder() -> Iterator[tuple[Exporter, RunRecorder, Any]]:
    run = synthetic_run(ranks=4, iterations=3, seed=7)
    recorder = RunRecorder(
        run.flows,
        run.collectives,
        RunInfo("prom-system", 25.0, "phantom", "clos"),
        run.line_rate_bps,
    )
    exporter = Exporter(make_registry(recorder.live), "127.0.0.1", port=0)
    exporter.start()
    try:
        yield exporter, recorder, run
    finally:
        exporter.stop()


def test_prometheus_scrapes_a_short_run(
    tmp_path: Path, exporter_and_recorder: tuple[Exporter, RunRecorder, Any]
) -> None:
    if not PROMETHEUS.is_file():
        require("system test needs /usr/bin/prometheus (run ./setup.sh)")
    exporter, recorder, run = exporter_and_recorder
    assert exporter.port is not None
    server = PrometheusServer(tmp_path, exporter.port)
    try:
        wait_until(
            "prometheus ready", lambda: get_json(f"{server.base}/api/v1/status/buildinfo"), 20
        )
        wait_until("first scrape", lambda: server.query('up{job="emulator"} == 1'), 15)
        # Feed the run in chunks over a few seconds, so several scrapes see it in progress.
        chunk = len(run.events) // FEED_CHUNKS + 1
        for i in range(0, len(run.events), chunk):
            recorder.on_events(run.events[i : i + chunk])
            time.sleep(FEED_PAUSE_S)
        flows = recorder.builder.flow_records()
        colls = recorder.builder.collective_records()
        wait_until(
            "final values scraped",
            lambda: server.query(f"sum(emulator_flows_completed_total) == {len(flows)}"),
            15,
        )

        (info,) = server.query("emulator_run_info")
        assert info["metric"]["scenario"] == "prom-system" and info["metric"]["tdf"] == "25"
        assert server.scalar("emulator_run_time_dilation_factor") == 25.0
        # The counters moved during the run: scraped more than once with different values.
        assert (
            server.scalar(
                'changes(emulator_flows_completed_total{collective_type="ALL_REDUCE"}[1m])'
            )
            >= 1
        )
        assert server.scalar("sum(emulator_cnps_sent_total)") == sum(f.cnps_sent for f in flows)
        assert server.scalar("sum(emulator_ce_marked_packets_total)") == sum(
            f.ce_marks for f in flows
        )

        busbw = {
            (r["metric"]["collective_type"], int(r["metric"]["iteration"])): float(r["value"][1])
            for r in server.query("emulator_collective_busbw_bytes_per_second")
        }
        assert len(busbw) == 6
        for c in colls:
            assert c.busbw_bytes_per_s is not None and c.ideal_busbw_bytes_per_s is not None
            assert busbw[(c.collective_type, c.iteration)] == pytest.approx(c.busbw_bytes_per_s)
            assert 0 < busbw[(c.collective_type, c.iteration)] < c.ideal_busbw_bytes_per_s

        p99 = {
            r["metric"]["collective_type"]: float(r["value"][1])
            for r in server.query(
                "histogram_quantile(0.99, sum by (le, collective_type) "
                "(emulator_flow_completion_time_seconds_bucket))"
            )
        }
        for ctype, value in p99.items():
            fcts = [f.fct_s for f in flows if f.collective_type == ctype and f.fct_s is not None]
            # Prometheus interpolates inside the bucket holding the true p99 (1-2-5 bounds).
            assert max(fcts) / 2.5 <= value <= max(fcts) * 2.5
        assert set(p99) == {"ALL_REDUCE", "ALL_TO_ALL"}

        util = server.query("max_over_time(emulator_nic_utilization_ratio[1m])")
        assert len(util) == 8 and all(0.0 < float(r["value"][1]) <= 1.0 + 1e-6 for r in util)
        assert server.scalar("count(emulator_switch_port_queue_bytes)") == 4
        assert server.scalar("max(emulator_dcqcn_current_rate_bytes_per_second)") <= 400e9 / 8
    finally:
        server.stop()
    assert server.proc.returncode is not None
