"""The live Prometheus exporter: a custom collector computing every metric at scrape time from
collectors.live.LiveMetrics, served on an explicit registry.

Names: prefix `emulator_`, base units (seconds, bytes, ratios 0..1), counters end in `_total`;
labels are bounded (rank, collective_type, iteration, direction, switch, port, stat, server,
training_job), never a flow id. Times are in the target timescale (divided by the TDF); counters
count real packets and bytes, so a PromQL rate() is per wall-clock second. The Grafana dashboard
may only query what this exporter emits, and every panel returns data from a real run
(tests/unit/test_collectors_grafana.py, tests/system/test_grafana_dashboard.py):

    emulator_run_info{scenario,tdf,marker,fabric}              emulator_run_time_dilation_factor
    emulator_run_target_time_seconds                            emulator_machine_cpu_busy_ratio
    emulator_flows_started_total{collective_type}               emulator_flows_completed_total{..}
    emulator_flow_completed_bytes_total{collective_type}
    emulator_flow_completion_time_seconds{collective_type}     (histogram: _bucket, _sum, _count)
    emulator_collectives_completed_total{collective_type}
    emulator_collective_completion_time_seconds{collective_type,iteration}
    emulator_collective_busbw_bytes_per_second{collective_type,iteration}
    emulator_collective_ideal_busbw_bytes_per_second{collective_type}
    emulator_{data_packets,retransmitted_packets,ce_marked_packets,cnps_sent,cnps_received}_total
        {rank,collective_type}
    emulator_nic_{transmit,receive}_bytes_total{rank}          emulator_nic_utilization_ratio{rank,direction}
    emulator_dcqcn_current_rate_bytes_per_second{rank,stat=min|mean|max}
    emulator_switch_port_{transmit_bytes,transmit_packets,ecn_marked_packets,dropped_packets}_total
        {switch,port}
    emulator_switch_port_queue_bytes{switch,port}               emulator_switch_port_utilization_ratio{..}
    emulator_switch_port_pfc_equivalent_pause_seconds_total{switch,port}  (target time the queue
        spent at or above the port's PFC XOFF threshold: a PFC fabric would have paused then)
    emulator_switch_port_pfc_equivalent_pauses_total{switch,port}
    emulator_switch_port_collective_{transmit_bytes,ecn_marked_packets,queue_byte_seconds,
        pfc_equivalent_pause_seconds}_total{switch,port,collective_type,training_job}  (attribution:
        collectors.attribution's rows; the simulator and the emulated eBPF marker only)
    emulator_switch_tier_group_load_max_to_mean_ratio{tier_group}   (MMR and JFI of the group's
    emulator_switch_tier_group_load_jain_fairness_ratio{tier_group}  links over their last sample
        interval, collectors.balance; a group that carried nothing in it is left out)
    emulator_{reordered_packets,held_out_of_order_packets,sacks_sent}_total{rank}  (receiver)
    emulator_sacks_received_total{rank}  (sender; these four from the tester's per-QP counters,
        once the run sets `queue_pair_source` on its LiveMetrics: a callable returning
        collectors.queue_pairs.rank_totals; absent until then)
    emulator_server_cpu_busy_ratio{server}                     (a run over a cluster)
    emulator_fidelity_verdict{server,verdict}  (1; server "all" is the run; "running" until
    emulator_fidelity_reasons{server}           judged; metrics.prometheus.linger_s keeps the
        final values served after the run)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from collectors.balance import last_interval_balance
from collectors.live import CONGESTION_COUNTERS, LiveMetrics
from emulator.errors import EnvironmentProblem
from emulator.latency import BOUNDS_S

PREFIX = "emulator_"

# Congestion counter (collectors.live.CONGESTION_COUNTERS) -> (metric name, help).
_CONGESTION_METRICS = {
    "packets": ("data_packets", "RoCEv2 data packets sent (incl. retransmissions), by sender"),
    "retransmitted_packets": ("retransmitted_packets", "Data packets sent again, by sender"),
    "ce_marks": ("ce_marked_packets", "CE-marked data packets received, by receiver"),
    "cnps_sent": ("cnps_sent", "CNPs sent by the notification point (receiver)"),
    "cnps_received": ("cnps_received", "CNPs received by the reaction point (sender)"),
}

_PORT_COUNTERS = (
    ("switch_port_transmit_bytes", "Bytes transmitted by a switch egress port"),
    ("switch_port_transmit_packets", "Packets transmitted by a switch egress port"),
    ("switch_port_ecn_marked_packets", "Packets CE-marked at a switch egress port"),
    ("switch_port_dropped_packets", "Packets dropped at a switch egress port"),
)


# Per-rank counter of the tester (collectors.queue_pairs.rank_totals) -> (metric name, help).
_QUEUE_PAIR_METRICS = {
    "reordered_packets": (
        "reordered_packets",
        "Data packets that arrived after one with a higher PSN (RFC 4737), by receiver",
    ),
    "held_out_of_order": (
        "held_out_of_order_packets",
        "Data packets the receiver kept ahead of a gap (selective reliability), by receiver",
    ),
    "sacks_sent": ("sacks_sent", "Selective acknowledgements sent, by receiver"),
    "sacks_received": ("sacks_received", "Selective acknowledgements received, by sender"),
}

# Prometheus buckets of the latency histogram: every 5th of emulator.latency's (4 a decade)
LATENCY_BUCKETS_S = tuple(float(b) for b in BOUNDS_S[4::5])


class LiveCollector(Collector):
    """Reads a LiveMetrics snapshot under its lock and yields metric families."""

    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def describe(self) -> list[Metric]:
        # No describe-time families: registration must not scrape a half-built run.
        return []

    def collect(self) -> Iterator[Metric]:
        with self.live.lock:
            families = list(self._families())
        yield from families

    def _families(self) -> Iterator[Metric]:
        live = self.live
        p = PREFIX
        info = live.info
        run_info = InfoMetricFamily(
            p + "run", "The run: scenario, time dilation factor, ECN marker, fabric"
        )
        run_info.add_metric(
            [],
            {
                "scenario": info.scenario,
                "tdf": f"{info.tdf:g}",
                "marker": info.marker,
                "fabric": info.fabric,
            },
        )
        yield run_info
        yield GaugeMetricFamily(
            p + "run_time_dilation_factor",
            "Time dilation factor: wall-clock durations are this many times the target's",
            value=info.tdf,
        )
        yield GaugeMetricFamily(
            p + "run_target_time_seconds",
            "Latest event time of the run, target timescale (wall-clock / TDF)",
            value=live.target_time_s,
        )

        by_type = ["collective_type"]
        started = CounterMetricFamily(p + "flows_started", "Flows started", labels=by_type)
        completed = CounterMetricFamily(p + "flows_completed", "Flows completed", labels=by_type)
        fbytes = CounterMetricFamily(
            p + "flow_completed_bytes", "Payload bytes of completed flows", labels=by_type
        )
        for ctype, n in sorted(live.flows_started.items()):
            started.add_metric([ctype], n)
        for ctype, n in sorted(live.flows_completed.items()):
            completed.add_metric([ctype], n)
        for ctype, n in sorted(live.flow_bytes_completed.items()):
            fbytes.add_metric([ctype], n)
        yield from (started, completed, fbytes)

        fct = HistogramMetricFamily(
            p + "flow_completion_time_seconds",
            "Flow completion time, target timescale",
            labels=by_type,
        )
        for ctype, hist in sorted(live.fct.items()):
            fct.add_metric([ctype], hist.cumulative(), sum_value=hist.sum_s)
        yield fct

        latency = HistogramMetricFamily(
            p + "one_way_latency_seconds",
            "One-way latency of data packets per traffic class (DSCP), target timescale",
            labels=["dscp"],
        )
        source = live.latency_source
        for dscp, h in sorted((source() if source is not None else {}).items()):
            latency.add_metric([str(dscp)], h.cumulative(LATENCY_BUCKETS_S), sum_value=h.sum_s)
        yield latency

        ccount = CounterMetricFamily(
            p + "collectives_completed", "Collective instances completed", labels=by_type
        )
        for ctype, n in sorted(live.collectives_completed.items()):
            ccount.add_metric([ctype], n)
        yield ccount
        by_iter = ["collective_type", "iteration"]
        ctime = GaugeMetricFamily(
            p + "collective_completion_time_seconds",
            "Mean completion time of the iteration's completed instances, target timescale",
            labels=by_iter,
        )
        cbusbw = GaugeMetricFamily(
            p + "collective_busbw_bytes_per_second",
            "Mean nccl-tests bus bandwidth of the iteration's completed instances",
            labels=by_iter,
        )
        for (ctype, iteration), stats in sorted(live.iterations.items()):
            labels = [ctype, str(iteration)]
            ctime.add_metric(labels, stats.completion_time_sum_s / stats.instances)
            if stats.busbw_instances:
                cbusbw.add_metric(labels, stats.busbw_sum_bytes_per_s / stats.busbw_instances)
        yield from (ctime, cbusbw)
        ideal = GaugeMetricFamily(
            p + "collective_ideal_busbw_bytes_per_second",
            "Bus bandwidth of the collective type in the plan's congestion-free model",
            labels=by_type,
        )
        for ctype, value in sorted(live.ideal_busbw_bytes_per_s.items()):
            ideal.add_metric([ctype], value)
        yield ideal

        congestion = {
            name: CounterMetricFamily(p + metric, doc, labels=["rank", "collective_type"])
            for name, (metric, doc) in _CONGESTION_METRICS.items()
        }
        for (rank, ctype), counts in sorted(live.congestion.items()):
            for name, value in zip(CONGESTION_COUNTERS, counts, strict=True):
                congestion[name].add_metric([str(rank), ctype], value)
        yield from congestion.values()

        tx = CounterMetricFamily(
            p + "nic_transmit_bytes", "Bytes sent by a rank's interface", labels=["rank"]
        )
        rx = CounterMetricFamily(
            p + "nic_receive_bytes", "Bytes received by a rank's interface", labels=["rank"]
        )
        for (rank, direction), n in sorted(live.nic_bytes.items()):
            (tx if direction == "tx" else rx).add_metric([str(rank)], n)
        util = GaugeMetricFamily(
            p + "nic_utilization_ratio",
            "Share of the emulated line rate used over the last sample interval",
            labels=["rank", "direction"],
        )
        for (rank, direction), value in sorted(live.nic_utilization.items()):
            util.add_metric([str(rank), direction], value)
        yield from (tx, rx, util)

        rate = GaugeMetricFamily(
            p + "dcqcn_current_rate_bytes_per_second",
            "DCQCN current rate over a rank's queue pairs (stat: min, mean, max), target timescale",
            labels=["rank", "stat"],
        )
        per_rank: dict[int, list[float]] = {}
        for (rank, _qp), bps in live.qp_rate_bps.items():
            per_rank.setdefault(rank, []).append(bps / 8.0)
        for rank, rates in sorted(per_rank.items()):
            rate.add_metric([str(rank), "min"], min(rates))
            rate.add_metric([str(rank), "mean"], sum(rates) / len(rates))
            rate.add_metric([str(rank), "max"], max(rates))
        yield rate

        port_labels = ["switch", "port"]
        port_families = [
            CounterMetricFamily(p + name, doc, labels=port_labels) for name, doc in _PORT_COUNTERS
        ]
        for key, totals in sorted(live.port_totals.items()):
            for family, value in zip(port_families, totals, strict=True):
                family.add_metric(list(key), value)
        yield from port_families
        queue = GaugeMetricFamily(
            p + "switch_port_queue_bytes",
            "Bytes queued at a switch egress port",
            labels=port_labels,
        )
        for key, qbytes in sorted(live.port_queue_bytes.items()):
            queue.add_metric(list(key), qbytes)
        putil = GaugeMetricFamily(
            p + "switch_port_utilization_ratio",
            "Share of the port's line rate used over the last sample interval",
            labels=port_labels,
        )
        for key, value in sorted(live.port_utilization.items()):
            putil.add_metric(list(key), value)
        yield from (queue, putil)
        paused = CounterMetricFamily(
            p + "switch_port_pfc_equivalent_pause_seconds",
            "Target seconds a switch egress queue spent at or above its PFC XOFF threshold (a PFC "
            "fabric would have paused the upstream; the emulated fabric cannot)",
            labels=port_labels,
        )
        pauses = CounterMetricFamily(
            p + "switch_port_pfc_equivalent_pauses",
            "Times a switch egress queue crossed its PFC XOFF threshold",
            labels=port_labels,
        )
        for key, (seconds, count) in sorted(live.port_pause.items()):
            paused.add_metric(list(key), seconds)
            pauses.add_metric(list(key), count)
        yield from (paused, pauses)
        yield from self._attribution_families()
        yield from self._multipath_families()
        cpu = GaugeMetricFamily(
            p + "machine_cpu_busy_ratio",
            "Share of this machine's CPU time busy over the last sample interval (all cores)",
        )
        if live.cpu_busy_ratio is not None:
            cpu.add_metric([], live.cpu_busy_ratio)
        yield cpu
        servers = GaugeMetricFamily(
            p + "server_cpu_busy_ratio",
            "A run over a cluster: each server's CPU time busy over the last sample interval "
            "(all its cores; server 'driver' is the coordinator's machine)",
            labels=["server"],
        )
        for server, ratio in sorted(dict(live.cpu_busy_by_server).items()):
            servers.add_metric([server], ratio)
        yield servers
        verdict = GaugeMetricFamily(
            p + "fidelity_verdict",
            "1 for the fidelity verdict of the run (server 'all') and of each server of a "
            "cluster: running until judged at the end, then ok, degraded or unknown",
            labels=["server", "verdict"],
        )
        reasons = GaugeMetricFamily(
            p + "fidelity_reasons",
            "Reasons the fidelity verdict gives against the results (0 while running or ok)",
            labels=["server"],
        )
        for server, (word, count) in sorted(live.fidelity.items()):
            verdict.add_metric([server, word], 1.0)
            reasons.add_metric([server], count)
        yield from (verdict, reasons)

    def _attribution_families(self) -> Iterator[Metric]:
        """Who throttled whom, live: each switch port's traffic, marks, queue byte-time and
        PFC-equivalent pause time by collective type (collectors.attribution: the simulator
        exactly, the emulated fabric by the class its marker counts)."""
        p = PREFIX
        # "job" is the label Prometheus gives the scrape job: a training job is training_job
        labels = ["switch", "port", "collective_type", "training_job"]
        families = [
            CounterMetricFamily(p + name, doc, labels=labels)
            for name, doc in (
                (
                    "switch_port_collective_transmit_bytes",
                    "Bytes a switch egress port sent, by the collective type they belong to",
                ),
                (
                    "switch_port_collective_ecn_marked_packets",
                    "Packets CE-marked at a switch egress port, by the collective type marked",
                ),
                (
                    "switch_port_collective_queue_byte_seconds",
                    "A switch egress queue's bytes integrated over target time, by the "
                    "collective type holding them (its share is the type's share of the queue)",
                ),
                (
                    "switch_port_collective_pfc_equivalent_pause_seconds",
                    "Target seconds at or above the port's PFC XOFF threshold charged to a "
                    "collective type (the simulator: PFC-paused time by queue share)",
                ),
            )
        ]
        for key, totals in sorted(self.live.port_collective.items()):
            for family, value in zip(families, totals, strict=True):
                family.add_metric(list(key), value)
        yield from families

    def _multipath_families(self) -> Iterator[Metric]:
        """Link-load balance per tier group (draft-calabria-bmwg-ai-fabric-training-bench: MMR;
        Jain, Chiu and Hawe 1984: JFI) and the receivers' reordering per rank."""
        p = PREFIX
        mmr = GaugeMetricFamily(
            p + "switch_tier_group_load_max_to_mean_ratio",
            "Max-to-mean ratio of the bytes the tier group's equal-cost links carried over the "
            "last sample interval (1: even; n: one of n links carried it all)",
            labels=["tier_group"],
        )
        jfi = GaugeMetricFamily(
            p + "switch_tier_group_load_jain_fairness_ratio",
            "Jain's fairness index of the tier group's link loads over the last sample interval "
            "(1: even; 1/n: one of n links carried it all)",
            labels=["tier_group"],
        )
        for group, (group_mmr, group_jfi) in last_interval_balance(
            self.live.port_utilization
        ).items():
            mmr.add_metric([group], group_mmr)
            jfi.add_metric([group], group_jfi)
        yield from (mmr, jfi)
        families = {
            name: CounterMetricFamily(p + metric, doc, labels=["rank"])
            for name, (metric, doc) in _QUEUE_PAIR_METRICS.items()
        }
        # the tester's per-rank counters (collectors.queue_pairs.rank_totals): the engine hands
        # its queue pairs' counters over at the end, so the run sets the source then
        source = self.live.queue_pair_source
        by_rank = source() if source is not None else {}
        for rank, counts in sorted(by_rank.items(), key=lambda kv: int(kv[0])):
            for name, family in families.items():
                if name in counts:
                    family.add_metric([str(rank)], counts[name])
        yield from families.values()


def make_registry(live: LiveMetrics) -> CollectorRegistry:
    """A fresh registry holding only this run's collector (no process/platform defaults)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(live))
    return registry


class Exporter:
    """Serves a registry over HTTP on bind_address:port while a run lasts; start() and stop()."""

    def __init__(
        self,
        registry: CollectorRegistry,
        bind_address: str = "127.0.0.1",
        port: int = 9464,
        enabled: bool = True,
    ) -> None:
        self.registry = registry
        self.bind_address = bind_address
        self.requested_port = port
        self.enabled = enabled
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        """The port actually bound (useful with port 0), or None when not serving."""
        if self._server is None:
            return None
        return int(self._server.server_address[1])

    def start(self) -> None:
        if not self.enabled or self._server is not None:
            return
        try:
            self._server, self._thread = start_http_server(
                self.requested_port, addr=self.bind_address, registry=self.registry
            )
        except OSError as exc:
            raise EnvironmentProblem(
                f"metrics.prometheus: cannot listen on {self.bind_address}:{self.requested_port}"
                f" ({exc.strerror or exc}); choose another port or set enabled: false"
            ) from exc

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5.0)
            self._server = None
            self._thread = None

    def __enter__(self) -> Exporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PrometheusSettings(Protocol):
    """The scenario's `metrics.prometheus` section (emulator.scenario.model.PrometheusSpec)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def bind_address(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def pushgateway_url(self) -> str | None: ...


def exporter_for(settings: PrometheusSettings, live: LiveMetrics) -> Exporter:
    """The run's exporter as the scenario configures it (not started)."""
    return Exporter(make_registry(live), settings.bind_address, settings.port, settings.enabled)


def push(
    registry: CollectorRegistry, url: str, job: str = "emulator", timeout_s: float = 10.0
) -> None:
    """Push the registry once to a Pushgateway (for runs shorter than a scrape interval)."""
    try:
        push_to_gateway(url, job=job, registry=registry, timeout=timeout_s)
    except OSError as exc:
        raise EnvironmentProblem(
            f"metrics.prometheus.pushgateway_url {url}: push failed: {exc}"
        ) from exc
