"""`emulate run --reference sim`: the emulated run held against a simulation of the same planned
workload (summary.json "reference", a fidelity reason per deviation beyond the stated bounds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.reference import ReferenceBounds
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from tests.integration.test_sim_backend import SMALL
from tests.system.noise import Try, on_a_noisy_machine

pytestmark = pytest.mark.system


def test_the_emulated_run_carries_its_simulated_reference(fabric_env: str, tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(seed=0).replace("  backend: sim\n", "  time_dilation: 1000\n"))
    out = tmp_path / "run"
    result = run_scenario(
        load_scenario(path),
        RunOptions(out_dir=out, progress=False, fabric_prefix=fabric_env, reference="sim"),
    )
    summary = result.summary
    assert summary["backend"] == "netns" and not result.partial
    reference = summary["reference"]
    folder = Path(reference["folder"])
    assert folder == tmp_path / "run-reference-sim" and (folder / "summary.json").is_file()
    assert set(reference["by_collective"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    assert reference["bounds"]["busbw_mean_ratio"] == ReferenceBounds().busbw_mean_ratio
    # the reference's other draws (sim.reference_draws, 4 by default) and what they read
    assert reference["reference_draws"] == 4
    assert [(folder / "draws" / str(n) / "summary.json").is_file() for n in (1, 2, 3)] == [True] * 3
    assert all(s["model_spread"]["draws"] == 3 for s in reference["by_collective"].values())
    for stats in reference["by_collective"].values():
        run_gbps, ref_gbps = stats["busbw_mean_gbps"]
        assert run_gbps > 0 and ref_gbps > 0
        assert stats["busbw_mean_ratio"] == run_gbps / ref_gbps
    # every deviation is a fidelity reason, and only those
    said = [
        r for r in summary["fidelity"]["reasons"] if r.startswith("differs from the simulation")
    ]
    assert len(said) == len(reference["deviations"])
    assert all(d in r for d, r in zip(reference["deviations"], said, strict=True))


# The small mixed job (issue 17's case: 8 hosts, an All-Reduce and an All-to-All): each rank's
# 8 MiB data-parallel All-Reduce crosses the leaves (ECMP puts three of the four rings' flows on
# one spine: DCQCN acts) while its expert-parallel group's 8 MiB All-to-All (2 MiB per peer, long
# next to the shapers' burst) runs within its leaf and meets the All-Reduce at the shared leaf
# downlinks; 2 steps, emulated at TDF 4000 (35 s of wall time)
AGREEMENT = (
    SMALL.format(seed=0)
    .replace("dispatch_bytes: 262144", "dispatch_bytes: 8388608")
    .replace("allreduce_bytes: 2097152", "allreduce_bytes: 8388608")
    .replace("  backend: sim\n", "  time_dilation: 4000\n")
)

# the machine's own reasons: none may remain at a TDF where the run held
MACHINE_REASONS = ("pacing deficit", "late", "NIC carried", "dropped", "retransmitted", "CPU")


def test_emulated_and_simulated_mixed_job_agree_where_the_machine_keeps_up(
    fabric_env: str, tmp_path: Path
) -> None:
    """The simulator's check against the emulated fabric (issue 17): at a TDF where the
    emulated verdict is ok, the same All-Reduce and All-to-All give busbw within 10% and an FCT
    KS distance within 0.25 (beyond 5% of FCT) in both, or within what 32 and 32 flows reach by
    chance (0.34 at 95%: an AR's KS read 0.281 in CI with nothing else amiss), with DCQCN acting
    (CNPs and marks in both); not widened by the reference draws' spread. Measured here
    (two runs): All-Reduce ratio 0.978/0.991, KS 0.094; All-to-All ratio 0.975/1.004, KS
    0.042/0.031. Before CNPs had a strict-priority class on the emulated ports (they queued
    behind up to 3.8 MB of data, 300 us, while the simulator sent them first), the All-to-All
    read 1.12x and KS 0.23, with 6 vs 69 CNPs."""

    def check(attempt: Try) -> None:
        path = tmp_path / f"agreement-{attempt.index}.yaml"
        path.write_text(AGREEMENT)
        result = run_scenario(
            load_scenario(path),
            RunOptions(
                out_dir=tmp_path / f"run-{attempt.index}",
                progress=False,
                fabric_prefix=fabric_env,
                reference="sim",
            ),
        )
        summary = result.summary
        by_type = summary["reference"]["by_collective"]
        for kind, stats in by_type.items():
            attempt.note(
                **{
                    f"{kind} ratio": stats["busbw_mean_ratio"],
                    f"{kind} ks": stats["fct_ks_distance"],
                    f"{kind} ks_plain": stats["fct_ks_distance_plain"],
                    f"{kind} ks_noise": stats["fct_ks_noise"],
                    f"{kind} spread": stats["model_spread"],
                    f"{kind} cnps": stats["cnps"],
                    f"{kind} marks": stats["ecn_marks"],
                }
            )
        attempt.note(verdict=summary["fidelity"]["verdict"], reasons=summary["fidelity"]["reasons"])
        machine = [
            r for r in summary["fidelity"]["reasons"] if any(m in r for m in MACHINE_REASONS)
        ]
        assert not machine, machine
        assert set(by_type) == {"ALL_REDUCE", "ALL_TO_ALL"}
        for stats in by_type.values():
            assert all(n > 0 for n in stats["cnps"]) and all(n > 0 for n in stats["ecn_marks"])
            assert 0.9 <= stats["busbw_mean_ratio"] <= 1.1
            # the stated 0.25, or what 32 and 32 flows reach by chance (Smirnov: 0.34)
            assert stats["fct_ks_distance"] <= max(0.25, stats["fct_ks_noise"])
        assert summary["fidelity"]["verdict"] == "ok"

    on_a_noisy_machine(check, what="emulated vs simulated mixed job")
