"""Link-load balance (MMR, JFI per tier group) and reordering in the summary, the ports file, the
live exporter and the reports: hand-computed cases, the grouping of a Clos's ports, the
over-time statistics with an idle interval left out, and the report section shown or not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from collectors.balance import (
    group_balance,
    jain_fairness_index,
    last_interval_balance,
    link_groups,
    load_balance_summary,
    max_to_mean_ratio,
    tier_group,
)
from collectors.live import RunInfo
from collectors.pages.multipath import multipath_section
from collectors.prometheus import make_registry
from collectors.queue_pairs import COUNTER_COLUMNS, QpRow
from collectors.recorder import RunRecorder
from collectors.reordering import (
    DEFAULT_LOAD_BALANCING,
    MultipathSetup,
    reordering_summary,
    shows_multipath,
)
from collectors.report import multipath_lines
from collectors.results import ResultsWriter
from collectors.samples import PortRow
from collectors.summary import Fidelity, RunMeta, build_summary
from collectors.tables import RunTables
from emulator.events import PortSample
from emulator.scenario import load_scenario
from emulator.scenario.loader import load_dataclass
from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec, LoadBalancingSpec
from fabrics.topology import build_clos

SPRAY = MultipathSetup("selective", "per_packet", {"leaf": "spray", "spine": "ecmp"})
ECMP = MultipathSetup("go_back_n", "per_qp", {"leaf": "ecmp", "spine": "ecmp"})


def test_mmr_and_jfi_by_hand() -> None:
    # one of four uplinks carries it all: MMR n, JFI 1/n
    assert max_to_mean_ratio([400, 0, 0, 0]) == 4.0
    assert jain_fairness_index([400, 0, 0, 0]) == 0.25
    assert max_to_mean_ratio([100] * 4) == 1.0
    assert jain_fairness_index([100] * 4) == 1.0
    # 300 and 100: max 300 over mean 200; 400^2 / (2 x (300^2 + 100^2)) = 0.8
    assert max_to_mean_ratio([300, 100]) == 1.5
    assert jain_fairness_index([300, 100]) == pytest.approx(0.8)
    for nothing in ([], [0, 0, 0]):
        assert max_to_mean_ratio(nothing) is None
        assert jain_fairness_index(nothing) is None


def test_groups_of_a_two_leaf_two_spine_clos_with_two_parallel_links() -> None:
    topology = build_clos(ClosSpec(hosts_per_leaf=2, leaves=2, spines=2, parallel_links=2))
    by_name = {key: tier_group(*key) for key in topology.links}
    assert {k: g for k, g in by_name.items() if g} == link_groups(topology)
    leaf_up = {k for k, g in by_name.items() if g == "leaf_up"}
    assert leaf_up == {
        (f"l{leaf}", f"l{leaf}-s{spine}-{k}") for leaf in (0, 1) for spine in (0, 1) for k in (0, 1)
    }
    spine_down = {k for k, g in by_name.items() if g == "spine_down"}
    assert spine_down == {
        (f"s{spine}", f"s{spine}-l{leaf}-{k}")
        for leaf in (0, 1)
        for spine in (0, 1)
        for k in (0, 1)
    }
    # host-facing ports (a leaf's toward its hosts, the hosts' NICs) are in no group
    assert by_name[("l0", "l0-h0")] == by_name[("h0", "eth0")] == ""
    assert set(by_name.values()) == {"leaf_up", "spine_down", ""}


def test_groups_of_a_three_tier_clos_and_names_of_no_clos() -> None:
    topology = build_clos(ClosSpec(hosts_per_leaf=1, leaves=2, spines=2, pods=2, super_spines=2))
    groups = link_groups(topology)
    assert groups == {key: tier_group(*key) for key in topology.links if tier_group(*key)}
    counts = {g: list(groups.values()).count(g) for g in set(groups.values())}
    # 4 leaves x 2 spines up and down; 4 spines x 2 super spines up and down
    assert counts == {"leaf_up": 8, "spine_down": 8, "spine_up": 8, "super_spine_down": 8}
    assert tier_group("c1", "c1-s3") == "super_spine_down"
    # a DUT's names, other names, a malformed parallel index: no group
    for switch, port in (("dut", "Ethernet1"), ("leaf0", "eth1"), ("l0", "l0-s1-x"), ("l0", "s1")):
        assert tier_group(switch, port) == ""


def port_row(time_s: float, switch: str, port: str, delta: int) -> PortRow:
    return PortRow(time_s, switch, port, 0, 0, 0, 0, 0, delta, 1.0 if time_s else 0.0, 0.0)


# two leaf uplinks and one that never carries anything, sampled four times: the baseline, an
# interval of 300/100/0, an idle interval, an interval of 200/200/0
UPLINK_DELTAS = {"l0-s0": (0, 300, 0, 200), "l0-s1": (0, 100, 0, 200), "l1-s0": (0, 0, 0, 0)}


def uplink_rows() -> list[PortRow]:
    return [
        port_row(float(t), port[:2], port, deltas[t])
        for t in range(4)
        for port, deltas in UPLINK_DELTAS.items()
    ] + [port_row(float(t), "l0", "l0-h0", 999) for t in range(4)]


def test_whole_run_and_over_time_with_an_idle_interval_left_out() -> None:
    section = load_balance_summary(RunTables.from_rows(ports=uplink_rows()).ports)
    assert list(section) == ["leaf_up"]  # the host port is in no group; no spine samples
    up = section["leaf_up"]
    # over the run 500, 300 and the idle link's 0
    assert up["links"] == 3 and up["bytes"] == 800
    assert up["mmr"] == pytest.approx(500 / (800 / 3))
    assert up["jfi"] == pytest.approx(800**2 / (3 * (500**2 + 300**2)))
    # intervals 300/100/0 and 200/200/0 (the baseline and the idle one left out)
    assert up["intervals"] == 2
    first, second = (300 * 3 / 400, 200 * 3 / 400)
    first_jfi, second_jfi = (400**2 / (3 * 100_000), 400**2 / (3 * 80_000))
    assert up["mmr_p50_over_time"] == pytest.approx(second)  # nearest-rank: the lower
    assert up["mmr_max_over_time"] == pytest.approx(first)
    assert up["jfi_p50_over_time"] == pytest.approx(first_jfi)
    assert up["jfi_min_over_time"] == pytest.approx(first_jfi)
    assert second_jfi > first_jfi


def test_a_group_that_never_carried_anything_is_not_measurable() -> None:
    got = group_balance({("s0", "s0-l0"): [0, 0], ("s0", "s0-l1"): [0, 0]})
    assert got["links"] == 2 and got["bytes"] == 0 and got["intervals"] == 0
    assert all(got[k] is None for k in ("mmr", "jfi", "mmr_p50_over_time", "jfi_min_over_time"))


def qp(**counts: int) -> QpRow:
    zeros: dict[str, Any] = dict.fromkeys(COUNTER_COLUMNS, 0)
    return QpRow(src_rank=0, dst_rank=1, qp=0, udp_sport=49152, **{**zeros, **counts})


QUEUE_PAIRS = [
    qp(
        data_packets_received=1000,
        reordered_packets=30,
        reorder_extent_sum=60,
        reorder_extent_max=5,
        held_out_of_order=25,
        sacks_sent=12,
        sacks_received=12,
        packets_retransmitted=2,
    ),
    qp(
        data_packets_received=1000,
        reordered_packets=10,
        reorder_extent_sum=40,
        reorder_extent_max=9,
    ),
]


def test_summary_keys_and_values_from_a_synthetic_run() -> None:
    tables = RunTables.from_rows(ports=uplink_rows(), queue_pairs=QUEUE_PAIRS)
    meta = RunMeta("t", 1.0, "phantom", "clos", multipath=SPRAY)
    summary = build_summary(meta, tables, partial=False)
    up = summary["load_balance"]["leaf_up"]
    assert set(up) == {
        "links",
        "bytes",
        "mmr",
        "jfi",
        "mmr_p50_over_time",
        "mmr_max_over_time",
        "jfi_p50_over_time",
        "jfi_min_over_time",
        "intervals",
    }
    assert summary["reordering"] == {
        "reliability": "selective",
        "entropy": "per_packet",
        "load_balancing": {"leaf": "spray", "spine": "ecmp"},
        "data_packets_received": 2000,
        "reordered_packets": 40,
        "reordered_share": 0.02,
        "reorder_extent_mean": 2.5,  # (60 + 40) / 40
        "reorder_extent_max": 9,
        "held_out_of_order": 25,
        "sacks_sent": 12,
        "retransmitted_packets": 2,
        "naks_sent": 0,
    }
    # recomputed from summary.json (emulate report): the setup comes back from `reordering`
    again = build_summary(RunMeta.from_summary(summary), tables, partial=False)
    assert again["reordering"] == summary["reordering"]
    assert again["load_balance"] == summary["load_balance"]


def test_without_queue_pairs_or_scenario_the_counts_and_setup_are_unknown() -> None:
    got = reordering_summary(RunTables.from_rows().queue_pairs, None)
    assert got["reliability"] is got["load_balancing"] is got["reordered_packets"] is None
    assert got["reordered_share"] is got["reorder_extent_mean"] is None
    summary = build_summary(RunMeta("t", 1.0, "m", "f"), RunTables.from_rows(), False)
    assert summary["load_balance"] == {}


SCENARIO = """\
name: spray
workload: {generate: {kind: allreduce, ranks: 8, size_bytes: 1048576}}
fabric: {kind: clos, hosts_per_leaf: 4, leaves: 2, spines: 2, parallel_links: 2,
         leaf: {load_balancing: {mode: spray}}}
transport: {reliability: selective}
"""


def test_the_writer_labels_ports_and_reads_the_setup_from_the_scenario(tmp_path: Path) -> None:
    tables = RunTables.from_rows(ports=uplink_rows(), queue_pairs=QUEUE_PAIRS)
    meta = RunMeta("spray", 1.0, "phantom", "clos", Fidelity())
    summary = ResultsWriter(tmp_path / "r", SCENARIO, render_plots=False).write(meta, tables, False)
    assert summary["reordering"]["reliability"] == "selective"
    assert summary["reordering"]["entropy"] == "per_qp"
    assert summary["reordering"]["load_balancing"] == {"leaf": "spray", "spine": "ecmp"}
    ports = pq.read_table(tmp_path / "r" / "ports.parquet").to_pylist()
    assert {(p["port"], p["tier_group"]) for p in ports} == {
        ("l0-s0", "leaf_up"),
        ("l0-s1", "leaf_up"),
        ("l1-s0", "leaf_up"),
        ("l0-h0", ""),
    }
    on_disk = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert on_disk["load_balance"] == summary["load_balance"]
    # a writer whose text is no scenario (a probe) leaves the setup unknown
    other = ResultsWriter(tmp_path / "p", "probe\n", render_plots=False).write(meta, tables, False)
    assert other["reordering"]["reliability"] is None


ROOT = Path(__file__).resolve().parents[2]
SCENARIO_FILES = sorted(ROOT.glob("scenarios/**/*.yaml"))


def model_setup(scenario: Any) -> MultipathSetup:
    """The setup as the scenario model reads it."""
    fabric = scenario.fabric
    tiers = getattr(fabric, "tiers", {})
    return MultipathSetup(
        scenario.transport.reliability,
        scenario.transport.entropy,
        {
            name: tier.load_balancing.mode
            for name, tier in tiers.items()
            if name != "super_spine" or fabric.super_spines > 0
        },
    )


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_the_setup_read_as_yaml_is_the_scenario_models(path: Path) -> None:
    assert MultipathSetup.of_scenario_text(path.read_text()) == model_setup(load_scenario(path))


def test_the_setup_of_a_three_tier_spray_scenario_and_the_default_mode() -> None:
    text = SCENARIO.replace("parallel_links: 2", "pods: 2, super_spines: 2")
    assert MultipathSetup.of_scenario_text(text) == model_setup(
        load_dataclass(Scenario, yaml.compose(text), Path("t.yaml"))
    )
    assert LoadBalancingSpec().mode == DEFAULT_LOAD_BALANCING
    assert MultipathSetup.of_scenario_text("probe\n") is None


def summary_of(setup: MultipathSetup | None, reordered: int) -> dict[str, Any]:
    tables = RunTables.from_rows(
        ports=uplink_rows(),
        queue_pairs=[qp(data_packets_received=100, reordered_packets=reordered)],
    )
    return build_summary(RunMeta("t", 1.0, "m", "f", multipath=setup), tables, False)


@pytest.mark.parametrize(
    ("setup", "reordered", "shown"),
    [
        (SPRAY, 0, True),
        (MultipathSetup("go_back_n", "per_packet", {"leaf": "ecmp"}), 0, True),
        (MultipathSetup("selective", "per_qp", {"leaf": "ecmp"}), 0, True),
        (MultipathSetup("go_back_n", "per_qp", {"leaf": "flowlet"}), 0, True),
        (ECMP, 0, False),
        (ECMP, 3, True),  # reordered anyway (a link event, a retransmission's overtaking)
        (None, 0, False),
    ],
)
def test_the_report_section_only_for_multipath(
    setup: MultipathSetup | None, reordered: int, shown: bool
) -> None:
    summary = summary_of(setup, reordered)
    assert shows_multipath(summary) is shown
    page = multipath_section(summary)
    lines = multipath_lines(summary)
    if not shown:
        assert page == "" and lines == []
        return
    assert "Load balancing and reordering" in page
    assert "leaf uplinks (leaf to spine)" in page and "RFC 4737" in page
    assert lines[0].startswith("load balancing and reordering")
    assert any(line.strip().startswith("leaf_up: 3 links, MMR 1.875") for line in lines)


def test_live_mmr_jfi_per_tier_group_and_reordering_per_rank() -> None:
    assert last_interval_balance({("l0", "l0-s0"): 0.4, ("l0", "l0-s1"): 0.0}) == {
        "leaf_up": (2.0, 0.5)
    }
    assert last_interval_balance({("s0", "s0-l0"): 0.0, ("l0", "l0-h0"): 0.9}) == {}
    rec = RunRecorder([], [], RunInfo("s", 1.0, "m", "clos"), 100e9)
    rec.on_events(
        [
            PortSample(t, "l0", port, sent, 0, 0, 0, 0)
            for t, scale in ((1.0, 0), (2.0, 1))
            for port, sent in (("l0-s0", 300 * scale), ("l0-s1", 100 * scale))
        ]
    )
    rec.live.queue_pair_source = lambda: {  # the tester's per-rank counters, at the end
        "1": {"reordered_packets": 40, "held_out_of_order": 25, "sacks_sent": 12},
        "0": {"sacks_received": 12},
    }
    text = generate_latest(make_registry(rec.live)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    group = (("tier_group", "leaf_up"),)
    assert samples[("emulator_switch_tier_group_load_max_to_mean_ratio", group)] == 1.5
    assert samples[("emulator_switch_tier_group_load_jain_fairness_ratio", group)] == pytest.approx(
        0.8
    )
    assert samples[("emulator_reordered_packets_total", (("rank", "1"),))] == 40
    assert samples[("emulator_held_out_of_order_packets_total", (("rank", "1"),))] == 25
    assert samples[("emulator_sacks_sent_total", (("rank", "1"),))] == 12
    assert samples[("emulator_sacks_received_total", (("rank", "0"),))] == 12
