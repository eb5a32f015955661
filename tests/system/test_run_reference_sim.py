"""`emulate run --reference sim`: the emulated run held against a simulation of the same planned
workload (summary.json "reference", a fidelity reason per deviation beyond the stated bounds)."""

from __future__ import annotations

from pathlib import Path

from collectors.reference import ReferenceBounds
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from tests.integration.test_sim_backend import SMALL


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
