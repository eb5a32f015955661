"""The fidelity verdict's checks on hand-made tables, and CPU load from /proc/stat readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.cpu import CpuSampler, read_cpu_jiffies
from collectors.fidelity import FidelityLimits, assess_fidelity
from collectors.queue_pairs import QpRow
from collectors.records import FlowRecord
from collectors.samples import CpuRow, NicRow, PortRow
from collectors.tables import RunTables
from emulator.errors import EnvironmentProblem

ROOT = Path(__file__).resolve().parents[2]


def flow(retx: int) -> FlowRecord:
    return FlowRecord(
        0, 0, "ALL_REDUCE", 0, 0, 0, 1, 0, 49152, 100, 0.0, 1.0, 1.0, 1, retx, 0, 0, 0
    )


def port(t: float, drops: int) -> PortRow:
    return PortRow(t, "leaf0", "eth1", 0, 0, 0, drops, 0, 0, 0.0, 0.0)


def test_a_clean_run_is_ok() -> None:
    tables = RunTables.from_rows(
        flows=[flow(0)],
        ports=[port(0.0, 5), port(1.0, 5)],  # drops counted before the run do not count
        nic=[NicRow(1.0, 0, "tx", 10, 10, 1.0, 1.03)],
        # the machine's CPU is recorded, not judged: another tenant is not the run
        cpu=[CpuRow(float(t), 0.99) for t in range(10)],
    )
    fidelity = assess_fidelity(tables)
    assert fidelity.verdict == "ok" and fidelity.reasons == () and fidelity.unknown == ()


def test_each_check_gives_its_reason() -> None:
    tables = RunTables.from_rows(
        flows=[flow(3)],
        ports=[port(0.0, 5), port(1.0, 12)],
        nic=[NicRow(1.0, 2, "rx", 10, 10, 1.0, 1.4)],
    )
    fidelity = assess_fidelity(tables, extra_reasons=["pacing fell behind on rank 3"])
    assert fidelity.verdict == "degraded"
    text = "\n".join(fidelity.reasons)
    assert "dropped 7 packets" in text and "leaf0:eth1 7" in text
    assert "3 packets were retransmitted" in text
    assert "140% of its emulated line rate" in text
    assert fidelity.reasons[-1] == "pacing fell behind on rank 3"
    lossy = assess_fidelity(tables, FidelityLimits(lossless=False))
    assert not any("lossless" in r for r in lossy.reasons) and len(lossy.reasons) == 1


def test_a_nic_sample_may_carry_its_shapers_burst_above_the_rate() -> None:
    """A token bucket passes at most rate x T + bucket bytes in any window T (RFC 2697, the
    committed burst size): a short sample right after idle reads above the rate by the bucket,
    which is no overrun; anything beyond the bucket still is."""
    rate_bps, interval_s, burst = 100e9, 8.38e-6, 8420
    at_rate = rate_bps / 8 * interval_s

    def sample(delta: float) -> NicRow:
        return NicRow(
            1.0, 5, "tx", int(delta), int(delta), interval_s, delta * 8 / (interval_s * rate_bps)
        )

    ports = [port(0.0, 0), port(1.0, 0)]
    within = RunTables.from_rows(flows=[flow(0)], ports=ports, nic=[sample(at_rate + burst)])
    assert assess_fidelity(within, FidelityLimits(nic_burst_bytes=burst)).verdict == "ok"
    # without a bucket to allow for, the same sample is an overrun (108%)
    assert "108% of its emulated line rate" in assess_fidelity(within).reasons[0]
    beyond = RunTables.from_rows(flows=[flow(0)], ports=ports, nic=[sample(1.06 * at_rate + burst)])
    reasons = assess_fidelity(beyond, FidelityLimits(nic_burst_bytes=burst)).reasons
    assert (
        len(reasons) == 1
        and "106% of its emulated line rate beyond its shaper's 8420" in reasons[0]
    )


def test_a_nic_is_judged_over_samples_in_a_row_not_its_noisiest_one() -> None:
    """A sample's ends carry the counter reads' jitter: one sample at 107% next to one at 93%
    is the rate read with noise (the two together are at it); a NIC at 107% sample after
    sample runs fast."""
    rate_bps, interval_s = 100e9, 10e-6
    at_rate = rate_bps / 8 * interval_s

    def nic(shares: list[float]) -> list[NicRow]:
        return [
            NicRow(k * interval_s, 5, "tx", 0, int(s * at_rate), interval_s, s)
            for k, s in enumerate(shares, start=1)
        ]

    ports = [port(0.0, 0), port(1.0, 0)]
    noisy = RunTables.from_rows(flows=[flow(0)], ports=ports, nic=nic([1.0, 1.07, 0.93, 1.0]))
    assert assess_fidelity(noisy).verdict == "ok"
    fast = RunTables.from_rows(flows=[flow(0)], ports=ports, nic=nic([1.0, 1.07, 1.07, 1.07]))
    [reason] = assess_fidelity(fast).reasons
    assert "107% of its emulated line rate (over up to 3 samples in a row)" in reason


def qp(gaps: int) -> QpRow:
    return QpRow(0, 1, 0, 49152, 1, 26, 100, 409600, 4, 100, 1, 0, 104, 425984, gaps, 0,
                  100, 1, 0, 0, 0)  # fmt: skip


def test_retransmissions_without_a_switch_drop_are_put_down_to_reordering() -> None:
    """4 retransmissions, no switch drop, 4 packets past a gap (a main-job run here: the
    kernel's per-CPU forwarding reordered them): still degraded (go-back-N resent them), and
    the reason says where they came from; with a switch drop it does not guess."""
    clean = [port(0.0, 0), port(1.0, 0)]
    reordered = RunTables.from_rows(flows=[flow(4)], ports=clean, queue_pairs=[qp(4)])
    [reason] = assess_fidelity(reordered).reasons
    assert reason.startswith("4 packets were retransmitted")
    assert "no drop counted at a switch port's queue: 4 packets arrived out of sequence" in reason
    dropped = RunTables.from_rows(
        flows=[flow(4)], ports=[port(0.0, 0), port(1.0, 2)], queue_pairs=[qp(4)]
    )
    assert not any("out of sequence" in r for r in assess_fidelity(dropped).reasons)
    in_order = RunTables.from_rows(flows=[flow(4)], ports=clean, queue_pairs=[qp(0)])
    assert not any("out of sequence" in r for r in assess_fidelity(in_order).reasons)
    assert "reordered on this machine" in reason


def test_reordering_the_scenario_asks_for_is_named_not_put_down_to_the_machine() -> None:
    """A sprayed fabric reorders by design: the reason names the spraying, not this machine."""
    clean = [port(0.0, 0), port(1.0, 0)]
    reordered = RunTables.from_rows(flows=[flow(4)], ports=clean, queue_pairs=[qp(4)])
    limits = FidelityLimits(reordering_by="packet spraying at the leaf and spine tiers")
    [reason] = assess_fidelity(reordered, limits).reasons
    assert reason.startswith("4 packets were retransmitted in a fabric the scenario calls lossless")
    assert "the scenario's packet spraying at the leaf and spine tiers sends a flow's" in reason
    assert "on this machine" not in reason


def test_the_run_names_what_in_the_scenario_spreads_a_flow() -> None:
    import dataclasses

    from emulator.run.execute import reordering_causes
    from emulator.scenario import load_scenario
    from fabrics.spec import LoadBalancingSpec

    base = load_scenario(ROOT / "scenarios" / "moe_mix.yaml")
    assert reordering_causes(base) == ""
    fabric = base.fabric
    spray = dataclasses.replace(fabric.leaf, load_balancing=LoadBalancingSpec(mode="spray"))
    adaptive = dataclasses.replace(fabric.spine, load_balancing=LoadBalancingSpec(mode="adaptive"))
    both = dataclasses.replace(base, fabric=dataclasses.replace(fabric, leaf=spray, spine=adaptive))
    assert (
        reordering_causes(both)
        == "packet spraying at the leaf tier and adaptive routing at the spine tier"
    )
    entropy = dataclasses.replace(
        base, transport=dataclasses.replace(base.transport, entropy="per_packet")
    )
    assert reordering_causes(entropy) == "per-packet entropy"


def test_a_check_without_data_is_unknown_never_ok() -> None:
    """No port counters, no NIC interval: those checks cannot pass; the verdict says unknown
    (and degraded still wins over unknown)."""
    tables = RunTables.from_rows(flows=[flow(0)])
    fidelity = assess_fidelity(tables)
    assert fidelity.verdict == "unknown" and fidelity.reasons == ()
    assert any("switch drops" in u for u in fidelity.unknown)
    assert any("NIC rates" in u for u in fidelity.unknown)
    # a DUT's switch is not ours: its drops are not applicable, not unknown
    dut = assess_fidelity(tables, not_applicable=("drops_in_lossless_fabric",))
    assert not any("switch drops" in u for u in dut.unknown)
    assert assess_fidelity(tables, extra_reasons=["late ticks"]).verdict == "degraded"
    assert assess_fidelity(RunTables.from_rows()).verdict == "unknown"


def test_engine_timing_is_judged_per_worker_in_target_time() -> None:
    """p99 tick lateness / TDF against DCQCN's reaction timer (4 us), max against the increase
    period (300 us); a worker without ticks is unknown."""
    from emulator.timescale.verdict import engine_checks, timing_limits_s
    from emulator.transport.params import DcqcnParams

    dcqcn = DcqcnParams()
    assert timing_limits_s(dcqcn) == pytest.approx((4e-6, 300e-6))
    on_time = {"ticks": 1000, "p99_s": 2e-3, "max_s": 30e-3}  # wall seconds
    paced = {"sent_bytes": 1e9, "lost_bytes": 1e6}  # 0.1% behind
    meta = {
        "worker_tick_lateness": [on_time, on_time],
        "worker_busy_ratio": [0.5, 0.6],
        "worker_pacing": [paced, paced],
    }
    # TDF 1000: p99 2 us, max 30 us in target time: within both
    assert engine_checks(meta, 1000.0, dcqcn, 0.95) == ([], [])
    # TDF 100: p99 20 us > 4 us, max 300 us is not over 300 us
    reasons, unknown = engine_checks(meta, 100.0, dcqcn, 0.95)
    assert len(reasons) == 2 and all("reaction timer" in r for r in reasons) and not unknown
    # over a cluster each reason names the worker's server (the verdict's per-server part)
    reasons, _ = engine_checks({**meta, "worker_servers": ["a", "b"]}, 100.0, dcqcn, 0.95)
    assert [r.split(":")[0] for r in reasons] == [
        "engine worker 0 on server a",
        "engine worker 1 on server b",
    ]
    late = {"ticks": 1000, "p99_s": 1e-3, "max_s": 400e-3}
    behind = {"sent_bytes": 1e9, "lost_bytes": 8e7}
    reasons, _ = engine_checks(
        {"worker_tick_lateness": [late], "worker_busy_ratio": [0.99], "worker_pacing": [behind]},
        1000.0,
        dcqcn,
        0.95,
    )
    assert any("increase period" in r and "worker 0" in r for r in reasons)
    assert any("on a CPU 99%" in r for r in reasons)
    assert any("8.0% more bytes" in r and "pacing deficit" in r for r in reasons)
    # 5% is the limit: 4% behind passes the run's verdict, not a probe's (half the limit)
    slightly = {"sent_bytes": 1e9, "lost_bytes": 4e7}
    meta = {
        "worker_tick_lateness": [on_time],
        "worker_busy_ratio": [0.5],
        "worker_pacing": [slightly],
    }
    assert engine_checks(meta, 1000.0, dcqcn, 0.95) == ([], [])
    reasons, _ = engine_checks(meta, 1000.0, dcqcn, 0.95, deficit_limit=0.025)
    assert any("4.0% more bytes" in r for r in reasons)
    _, unknown = engine_checks({"worker_tick_lateness": [None]}, 1000.0, dcqcn, 0.95)
    assert any("tick lateness" in u for u in unknown) and any("CPU" in u for u in unknown)
    assert any("pacing deficit" in u for u in unknown)


def test_tick_lateness_histogram() -> None:
    from emulator.engine.lateness import TickLateness

    h = TickLateness()
    assert h.quantile_s(0.99) == 0.0
    for _ in range(990):
        h.add(0.0005)
    for _ in range(10):
        h.add(0.05)
    assert h.ticks == 1000 and h.max_s == 0.05
    assert 0.0005 <= h.quantile_s(0.99) <= 0.0005 * 1.26
    assert h.quantile_s(1.0) == 0.05
    h.add(1e-7)
    assert h.to_json()["ticks"] == 1001


def write_stat(path: Path, user: int, idle: int, iowait: int) -> None:
    # cpu user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {user} 0 0 {idle} {iowait} 0 0 0 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")


def test_cpu_busy_share_from_two_readings(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    write_stat(stat, user=100, idle=900, iowait=0)
    assert read_cpu_jiffies(stat) == (100, 1000)
    sampler = CpuSampler(stat)
    assert sampler.sample(0.0) is None  # baseline
    write_stat(stat, user=400, idle=1000, iowait=100)  # +300 busy, +200 idle/iowait
    sample = sampler.sample(1.0)
    assert sample is not None and sample.time_s == 1.0
    assert sample.busy_ratio == pytest.approx(0.6)


def test_cpu_sampler_reads_this_machine() -> None:
    busy, total = read_cpu_jiffies()
    assert 0 < busy < total


def test_bad_proc_stat_is_an_environment_problem(tmp_path: Path) -> None:
    bad = tmp_path / "stat"
    bad.write_text("intr 1 2 3\n")
    with pytest.raises(EnvironmentProblem, match="aggregate 'cpu' line"):
        read_cpu_jiffies(bad)


def test_each_part_of_a_backend_is_judged_on_what_it_held() -> None:
    """A cluster's servers: each gets the table checks on its own switches' ports, its ranks'
    NICs and the flows they send, plus the backend's reasons for it; the run's verdict stays
    the whole run's. The summary and the printed table carry both."""
    from collectors.fidelity import PartScope
    from collectors.report import summary_table
    from collectors.summary import Fidelity

    def port_of(switch: str, t: float, drops: int) -> PortRow:
        return PortRow(t, switch, "eth1", 0, 0, 0, drops, 0, 0, 0.0, 0.0)

    sent_by_2 = FlowRecord(
        0, 0, "ALL_REDUCE", 0, 0, 2, 0, 0, 49152, 100, 0.0, 1.0, 1.0, 1, 4, 0, 0, 0
    )
    tables = RunTables.from_rows(
        flows=[flow(0), sent_by_2],
        ports=[port_of(s, t, int(d * t)) for s, d in (("l0", 0), ("l1", 9)) for t in (0.0, 1.0)],
        nic=[NicRow(1.0, 0, "tx", 10, 10, 1.0, 0.9), NicRow(1.0, 2, "tx", 10, 10, 1.0, 0.9)],
    )
    parts = {
        "server a": PartScope(frozenset({"l0", "s0"}), frozenset({0, 1})),
        "server b": PartScope(
            frozenset({"l1"}), frozenset({2, 3}), reasons=("engine worker 1 on server b: late",)
        ),
    }
    fidelity = assess_fidelity(tables, parts=parts)
    assert fidelity.verdict == "degraded"
    a, b = fidelity.parts["server a"], fidelity.parts["server b"]
    assert a.verdict == "ok" and a.reasons == ()
    assert b.verdict == "degraded"
    assert any("dropped 9 packets" in r and "l1:eth1" in r for r in b.reasons)
    assert any("4 packets were retransmitted" in r for r in b.reasons)
    assert b.reasons[-1] == "engine worker 1 on server b: late"
    # a part without switches (a server of DUT ports) is not judged on switch counters
    dut = assess_fidelity(tables, parts={"server c": PartScope(frozenset(), frozenset({0}))})
    assert dut.parts["server c"].verdict == "ok"
    # round trip through summary.json, and one printed line per part
    again = Fidelity.from_json(fidelity.to_json())
    assert again == fidelity
    printed = summary_table({"fidelity": fidelity.to_json(), "collectives": {}})
    assert "  server a: ok" in printed
    assert "  server b: degraded (switch ports dropped 9" in printed


def test_the_engines_dependency_latency_is_judged_against_the_median_fct() -> None:
    """A flow released by a completion starts that late (the coordinator's path, across
    servers the driver's): over 5% of the median FCT it is a reason, naming where."""
    from emulator.timescale.verdict import dependency_reason

    fcts = [10e-6, 20e-6, 40e-6]  # median 20 us
    on_time = {"same_server": {"count": 50, "target_p50_us": 0.5, "target_p99_us": 3.0}}
    assert dependency_reason(on_time, fcts) is None  # 2.5%
    across = {**on_time, "cross_server": {"count": 7, "target_p50_us": 2.0}}
    reason = dependency_reason(across, fcts)
    assert reason is not None and "across servers" in reason
    assert "2 us (target time, p50)" in reason and "10% of the median flow's FCT (20 us)" in reason
    # nothing released, or no FCT: nothing to judge
    assert dependency_reason({"cross_server": {"count": 0, "target_p50_us": None}}, fcts) is None
    assert dependency_reason(across, []) is None
