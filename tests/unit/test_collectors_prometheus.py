"""The exporter's text output, parsed with prometheus_client's parser, against the records of
a synthetic run; serving over loopback HTTP; pushing to a (fake, loopback) Pushgateway."""

from __future__ import annotations

import http.server
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.live import FCT_BUCKETS_S, RunInfo
from collectors.prometheus import Exporter, exporter_for, make_registry, push
from collectors.recorder import RunRecorder
from tests.synthetic_run import synthetic_run

BOUNDED_LABELS = {
    "rank",
    "collective_type",
    "iteration",
    "direction",
    "switch",
    "port",
    "stat",
    "dscp",
    "server",
    "verdict",
    "training_job",
}


@pytest.fixture(scope="module")
def recorder() -> RunRecorder:
    run = synthetic_run(ranks=4, iterations=3, seed=3)
    rec = RunRecorder(
        run.flows, run.collectives, RunInfo("synth", 20.0, "phantom", "clos"), run.line_rate_bps
    )
    rec.on_events(run.events)
    return rec


def samples(rec: RunRecorder) -> dict[str, list[Any]]:
    text = generate_latest(make_registry(rec.live)).decode()
    out: dict[str, list[Any]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append(sample)
    return out


def test_names_units_and_label_sets_follow_the_conventions(recorder: RunRecorder) -> None:
    text = generate_latest(make_registry(recorder.live)).decode()
    families = list(text_string_to_metric_families(text))
    assert len(families) >= 20
    for family in families:
        assert family.name.startswith("emulator_")
        for sample in family.samples:
            assert set(sample.labels) - {"le"} <= BOUNDED_LABELS | {
                "scenario",
                "tdf",
                "marker",
                "fabric",
            }
            if family.type == "counter":
                assert sample.name.endswith("_total")
    assert "flow_id" not in text and "qp=" not in text


def test_run_info(recorder: RunRecorder) -> None:
    (info,) = samples(recorder)["emulator_run_info"]
    assert info.labels == {"scenario": "synth", "tdf": "20", "marker": "phantom", "fabric": "clos"}
    assert info.value == 1.0
    assert samples(recorder)["emulator_run_time_dilation_factor"][0].value == 20.0


def test_fct_histogram_matches_the_flow_records(recorder: RunRecorder) -> None:
    s = samples(recorder)
    records = recorder.builder.flow_records()
    for ctype in ("ALL_REDUCE", "ALL_TO_ALL"):
        fcts = [r.fct_s for r in records if r.collective_type == ctype and r.fct_s is not None]
        buckets = {
            x.labels["le"]: x.value
            for x in s["emulator_flow_completion_time_seconds_bucket"]
            if x.labels["collective_type"] == ctype
        }
        assert buckets["+Inf"] == len(fcts)
        for bound in FCT_BUCKETS_S:
            assert buckets[f"{bound:g}"] == sum(1 for f in fcts if f <= bound)
        (total,) = [
            x.value
            for x in s["emulator_flow_completion_time_seconds_sum"]
            if x.labels["collective_type"] == ctype
        ]
        assert total == pytest.approx(sum(fcts))


def test_congestion_counters_sum_to_the_records(recorder: RunRecorder) -> None:
    s = samples(recorder)
    records = recorder.builder.flow_records()
    cnps_sent_by_receiver: dict[str, float] = defaultdict(float)
    for r in records:
        cnps_sent_by_receiver[str(r.dst_rank)] += r.cnps_sent
    exported: dict[str, float] = defaultdict(float)
    for x in s["emulator_cnps_sent_total"]:
        exported[x.labels["rank"]] += x.value
    assert exported == cnps_sent_by_receiver and sum(exported.values()) > 0
    retx = sum(x.value for x in s["emulator_retransmitted_packets_total"])
    assert retx == sum(r.retransmitted_packets for r in records)
    ce = sum(x.value for x in s["emulator_ce_marked_packets_total"])
    assert ce == sum(r.ce_marks for r in records)


def test_collective_gauges_match_records(recorder: RunRecorder) -> None:
    s = samples(recorder)
    colls = recorder.builder.collective_records()
    for x in s["emulator_collective_busbw_bytes_per_second"]:
        ctype, it = x.labels["collective_type"], int(x.labels["iteration"])
        busbws = [
            c.busbw_bytes_per_s for c in colls if c.collective_type == ctype and c.iteration == it
        ]
        assert x.value == pytest.approx(sum(b for b in busbws if b) / len(busbws))
    assert len(s["emulator_collective_busbw_bytes_per_second"]) == 6  # 2 types x 3 iterations
    done = {x.labels["collective_type"]: x.value for x in s["emulator_collectives_completed_total"]}
    assert done == {"ALL_REDUCE": 3.0, "ALL_TO_ALL": 3.0}


def test_nic_port_and_rate_metrics(recorder: RunRecorder) -> None:
    s = samples(recorder)
    tx = {x.labels["rank"]: x.value for x in s["emulator_nic_transmit_bytes_total"]}
    flows = recorder.builder.flow_records()
    # Every flow's bytes were counted by the synthetic NIC counters by the last sample.
    assert tx == {str(r): float(sum(f.bytes for f in flows if f.src_rank == r)) for r in range(4)}
    utils = [x.value for x in s["emulator_nic_utilization_ratio"]]
    assert len(utils) == 8 and all(0.0 <= u <= 1.0 + 1e-6 for u in utils)
    rates = {
        (x.labels["rank"], x.labels["stat"]): x.value
        for x in s["emulator_dcqcn_current_rate_bytes_per_second"]
    }
    for rank in "0123":
        assert (
            0 < rates[(rank, "min")] <= rates[(rank, "mean")] <= rates[(rank, "max")] <= 400e9 / 8
        )
    queues = s["emulator_switch_port_queue_bytes"]
    assert {(x.labels["switch"], x.labels["port"]) for x in queues} == {
        ("leaf0", "eth1"),
        ("leaf0", "eth2"),
        ("leaf1", "eth1"),
        ("leaf1", "eth2"),
    }
    port_rows = recorder.ports.rows
    first = next(r for r in port_rows if (r.switch, r.port) == ("leaf1", "eth2"))
    last = [r for r in port_rows if (r.switch, r.port) == ("leaf1", "eth2")][-1]
    (exported,) = [
        x.value
        for x in s["emulator_switch_port_transmit_bytes_total"]
        if (x.labels["switch"], x.labels["port"]) == ("leaf1", "eth2")
    ]
    assert exported == last.tx_bytes - first.tx_bytes


def test_exporter_serves_on_loopback_and_stops(recorder: RunRecorder) -> None:
    exporter = Exporter(make_registry(recorder.live), "127.0.0.1", port=0)
    with exporter:
        port = exporter.port
        assert port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert "emulator_run_info{" in body
        assert exporter._server.server_address[0] == "127.0.0.1"
    assert exporter.port is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_disabled_exporter_does_not_listen(recorder: RunRecorder) -> None:
    exporter = Exporter(make_registry(recorder.live), port=0, enabled=False)
    exporter.start()
    assert exporter.port is None
    exporter.stop()


def test_push_to_a_pushgateway(recorder: RunRecorder) -> None:
    received: list[tuple[str, str, bytes]] = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(("PUT", self.path, body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        push(
            make_registry(recorder.live), f"http://127.0.0.1:{server.server_address[1]}", job="emu"
        )
        thread.join(timeout=5)
    finally:
        server.server_close()
    ((method, path, body),) = received
    assert method == "PUT" and path == "/metrics/job/emu"
    assert b"emulator_flows_completed_total" in body


def test_scrape_while_recording_is_consistent() -> None:
    run = synthetic_run(ranks=4, iterations=2, seed=5)
    rec = RunRecorder(run.flows, run.collectives, RunInfo("s", 1.0, "m", "f"), run.line_rate_bps)
    registry = make_registry(rec.live)
    stop = threading.Event()
    errors: list[BaseException] = []

    def scrape() -> None:
        try:
            for _ in range(2000):
                if stop.is_set():
                    return
                generate_latest(registry)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=scrape)
    thread.start()
    rec.on_events(run.events)
    stop.set()
    thread.join(timeout=30)
    assert not errors
    assert rec.live.flows_completed["ALL_TO_ALL"] == 2 * 12


def test_exporter_from_the_scenario_section(recorder: RunRecorder) -> None:
    from emulator.scenario.model import PrometheusSpec

    on = exporter_for(PrometheusSpec(port=0), recorder.live)
    with on:
        assert on.port and on.bind_address == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{on.port}/metrics", timeout=5) as resp:
            assert b"emulator_flows_started_total" in resp.read()
    off = exporter_for(PrometheusSpec(enabled=False, port=0), recorder.live)
    with off:
        assert off.port is None


def test_iteration_labels_stay_bounded() -> None:
    from collectors.live import LiveMetrics

    live = LiveMetrics(RunInfo("s", 1.0, "m", "f"), max_iterations=50)
    for iteration in range(60):
        live.collective_completed("ALL_REDUCE", iteration, 1e-3, 1e9, 2e9)
    assert sorted({it for _, it in live.iterations}) == list(range(10, 60))
    text = generate_latest(make_registry(live)).decode()
    assert 'iteration="9"' not in text and 'iteration="59"' in text
    assert live.collectives_completed["ALL_REDUCE"] == 60


def test_unknown_event_types_are_refused(recorder: RunRecorder) -> None:
    with pytest.raises(TypeError, match="str"):
        recorder.on_event("not an event")  # type: ignore[arg-type]


def test_a_busy_port_is_reported_with_the_scenario_key(recorder: RunRecorder) -> None:
    import socket

    from emulator.errors import EnvironmentProblem

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        exporter = Exporter(make_registry(recorder.live), "127.0.0.1", port)
        with pytest.raises(EnvironmentProblem, match=rf"metrics.prometheus: .*127.0.0.1:{port}"):
            exporter.start()
        assert exporter.port is None


def test_one_way_latency_histogram_per_class() -> None:
    """Read at scrape time from the engine's per-class histograms: bucket counts are the
    samples at or under each bound, the sum is theirs, one series per DSCP."""
    import numpy as np

    from collectors.prometheus import LATENCY_BUCKETS_S
    from emulator.latency import LatencyHistogram

    rec = RunRecorder((), (), RunInfo("synth", 1.0, "dut", "dut"), 1e9)
    values = {26: [1e-6, 2e-6, 30e-6, 0.5e-3], 48: [3e-6]}
    hists = {}
    for dscp, vs in values.items():
        hists[dscp] = LatencyHistogram()
        hists[dscp].add(np.array(vs))
    assert "emulator_one_way_latency_seconds_bucket" not in samples(rec)  # no engine yet
    rec.live.latency_source = lambda: hists
    s = samples(rec)
    for dscp, vs in values.items():
        buckets = {
            x.labels["le"]: x.value
            for x in s["emulator_one_way_latency_seconds_bucket"]
            if x.labels["dscp"] == str(dscp)
        }
        assert buckets["+Inf"] == len(vs)
        for bound in LATENCY_BUCKETS_S:
            assert buckets[f"{bound:.3g}"] == sum(1 for v in vs if v <= bound * (1 + 1e-9))
        (total,) = [
            x.value
            for x in s["emulator_one_way_latency_seconds_sum"]
            if x.labels["dscp"] == str(dscp)
        ]
        assert total == pytest.approx(sum(vs))


def test_pfc_equivalent_pauses_from_port_samples() -> None:
    """Cumulative pause counters of the port samples become per-port Prometheus counters from
    the first sample on (a reset counter adds what it counted since), ports.parquet keeps them,
    and summary.json's pfc_equivalent names the ports that would have paused."""
    from collectors.summary import pfc_equivalent
    from emulator.events import PortSample

    rec = RunRecorder((), (), RunInfo("pfc", 10.0, "ebpf", "clos"), 400e9)

    def port(t: float, name: str, pause_s: float | None, events: int | None) -> PortSample:
        return PortSample(t, "leaf0", name, 0, 0, 0, 0, 0, None, pause_s, events)

    rec.on_events(
        [
            port(0.0, "l0-s0", 1e-6, 1),  # the baseline: counted before the replay
            port(0.0, "l0-s1", 0.0, 0),
            port(0.0, "l0-h0", None, None),  # a marker without the data
            port(1.0, "l0-s0", 5e-6, 3),
            port(1.0, "l0-s1", 0.0, 0),
            port(2.0, "l0-s0", 2e-6, 1),  # reset: 2 us and 1 pause since
        ]
    )
    got = samples(rec)
    paused = {
        s.labels["port"]: s.value
        for s in got["emulator_switch_port_pfc_equivalent_pause_seconds_total"]
    }
    pauses = {
        s.labels["port"]: s.value for s in got["emulator_switch_port_pfc_equivalent_pauses_total"]
    }
    assert paused == pytest.approx({"l0-s0": 6e-6, "l0-s1": 0.0})
    assert pauses == {"l0-s0": 3.0, "l0-s1": 0.0}
    summary = pfc_equivalent(rec.tables())
    assert summary["known"] and summary["ports"][0]["port"] == "l0-s0"
    # first to last sample: 2 us - 1 us grew by 1 us (a reset makes it look smaller: never
    # negative), the other port never paused and is not listed
    assert [p["port"] for p in summary["ports"]] == ["l0-s0"]
    none = RunRecorder((), (), RunInfo("x", 1.0, "red", "clos"), 400e9)
    none.on_events([port(0.0, "p", None, None), port(1.0, "p", None, None)])
    assert pfc_equivalent(none.tables()) == {
        "known": False,
        "pause_s": None,
        "pauses": None,
        "ports": [],
    }


def test_the_verdict_is_running_until_judged_then_per_server(recorder: RunRecorder) -> None:
    (running,) = samples(recorder)["emulator_fidelity_verdict"]
    assert running.labels == {"server": "all", "verdict": "running"} and running.value == 1.0
    live = recorder.live
    try:
        live.judged("degraded", 2, {"s1": ("ok", 0), "s2": ("degraded", 2)})
        got = samples(recorder)
        verdicts = {
            s.labels["server"]: s.labels["verdict"] for s in got["emulator_fidelity_verdict"]
        }
        assert verdicts == {"all": "degraded", "s1": "ok", "s2": "degraded"}
        reasons = {s.labels["server"]: s.value for s in got["emulator_fidelity_reasons"]}
        assert reasons == {"all": 2.0, "s1": 0.0, "s2": 2.0}
    finally:
        live.judged("running", 0, {})


def test_attribution_rows_sum_per_port_and_collective_type() -> None:
    from collectors.attribution import AttributionRow, share_of
    from collectors.live import LiveMetrics

    live = LiveMetrics(RunInfo("a", 1.0, "phantom", "clos"))
    row = share_of(
        AttributionRow(1.0, 1.0, "l0", "p", 7, "ALL_TO_ALL", 0, 4096, 2, 0, queue_byte_s=0.25)
    )
    live.add_attribution(
        [
            row,
            row,
            share_of(
                AttributionRow(
                    2.0, 1.0, "l0", "p", 1, "ALL_REDUCE", 0, 100, 0, 0, pause_s=0.5, job="j"
                )
            ),
        ]
    )
    got = {
        (s.name, s.labels["collective_type"], s.labels["training_job"]): s.value
        for f in text_string_to_metric_families(generate_latest(make_registry(live)).decode())
        for s in f.samples
        if "collective_type" in s.labels and s.name.startswith("emulator_switch_port_collective")
    }
    p = "emulator_switch_port_collective_"
    assert got[(p + "transmit_bytes_total", "ALL_TO_ALL", "")] == 8192
    assert got[(p + "ecn_marked_packets_total", "ALL_TO_ALL", "")] == 4
    assert got[(p + "queue_byte_seconds_total", "ALL_TO_ALL", "")] == 0.5
    assert got[(p + "pfc_equivalent_pause_seconds_total", "ALL_REDUCE", "j")] == 0.5
