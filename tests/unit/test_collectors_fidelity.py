"""The fidelity verdict's checks on hand-made tables, and CPU load from /proc/stat readings."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.cpu import CpuSampler, read_cpu_jiffies
from collectors.fidelity import FidelityLimits, assess_fidelity
from collectors.records import FlowRecord
from collectors.samples import CpuRow, NicRow, PortRow
from collectors.tables import RunTables
from emulator.errors import EnvironmentProblem


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
        cpu=[CpuRow(t, 0.99 if t == 0 else 0.5) for t in range(10)],  # 10% saturated: at the limit
    )
    assert assess_fidelity(tables).verdict == "ok"


def test_each_check_gives_its_reason() -> None:
    tables = RunTables.from_rows(
        flows=[flow(3)],
        ports=[port(0.0, 5), port(1.0, 12)],
        nic=[NicRow(1.0, 2, "rx", 10, 10, 1.0, 1.4)],
        cpu=[CpuRow(float(t), 0.97) for t in range(4)] + [CpuRow(4.0, 0.2)],
    )
    fidelity = assess_fidelity(tables, extra_reasons=["pacing fell behind on rank 3"])
    assert fidelity.verdict == "degraded"
    text = "\n".join(fidelity.reasons)
    assert "in 80% of 5 samples" in text
    assert "dropped 7 packets" in text
    assert "3 packets were retransmitted" in text
    assert "140% of its emulated line rate" in text
    assert fidelity.reasons[-1] == "pacing fell behind on rank 3"
    lossy = assess_fidelity(tables, FidelityLimits(lossless=False))
    assert not any("lossless" in r for r in lossy.reasons) and len(lossy.reasons) == 2


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
