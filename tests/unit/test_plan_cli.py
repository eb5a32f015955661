"""`emulate plan` and `emulate generate` through the CLI: output keys, numbers and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.cli import main

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
KEYS = {
    "type",
    "group_size",
    "bytes",
    "instances",
    "flows",
    "ideal_time_s",
    "ideal_algbw_bytes_per_s",
    "ideal_busbw_bytes_per_s",
}


def test_generate_then_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "ar"
    assert (
        main(
            [
                "generate",
                "allreduce",
                "--out",
                str(prefix),
                "--ranks",
                "4",
                "--size-bytes",
                "4000000",
                "--iterations",
                "2",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["plan", "--trace", str(prefix), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {"collectives", "flows_total", "bytes_total", "ideal_job_time_s"} <= set(document)
    (row,) = document["collectives"]
    assert set(row) >= KEYS
    assert (row["type"], row["group_size"], row["bytes"], row["instances"]) == (
        "ALL_REDUCE",
        4,
        4000000,
        2,
    )
    assert document["bytes_total"] == 2 * (2 * 3 * 4000000)
    assert row["ideal_busbw_bytes_per_s"] == pytest.approx(12.5e9)
    assert document["ideal_job_time_s"] == pytest.approx(2 * row["ideal_time_s"])


def test_plan_algorithm_override_and_iterations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "ar"
    main(["generate", "allreduce", "--out", str(prefix), "--ranks", "4"])
    capsys.readouterr()
    code = main(
        [
            "plan",
            "--trace",
            str(prefix),
            "--json",
            "--iterations",
            "3",
            "--algorithm",
            "ALL_REDUCE=halving_doubling",
        ]
    )
    assert code == 0
    (row,) = json.loads(capsys.readouterr().out)["collectives"]
    assert (row["algorithm"], row["instances"]) == ("halving_doubling", 3)


def test_plan_scenario_with_generated_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\n"
        "workload:\n  generate: {kind: alltoall, ranks: 4, size_bytes: 400000}\n  iterations: 2\n"
        "fabric: {kind: clos, hosts_per_leaf: 2, leaves: 2, spines: 2, host_link_gbps: 100, fabric_link_gbps: 100}\n"
    )
    assert main(["plan", str(scenario), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["collectives"]
    assert (row["type"], row["instances"], row["flows"]) == ("ALL_TO_ALL", 2, 2 * 12)


def test_plan_human_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "ag"
    main(["generate", "allgather", "--out", str(prefix), "--ranks", "4"])
    capsys.readouterr()
    assert main(["plan", "--trace", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert "ALL_GATHER" in out and "12.5 GB/s" in out and "flows 12," in out


@pytest.mark.skipif(not TRACES.is_dir(), reason="shared traces absent")
def test_lone_send_fails_with_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    prefix = TRACES / "chakra-generated" / "generator_npus8" / "one_comm_send_node"
    assert main(["plan", "--trace", str(prefix)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has no comm_dst" in err and "lone send/recv" in err


def test_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "give either a SCENARIO file or --trace PREFIX" in capsys.readouterr().err
    assert main(["plan", "--trace", str(tmp_path / "none")]) == 2
    assert "no such file" in capsys.readouterr().err
    prefix = tmp_path / "ar"
    main(["generate", "allreduce", "--out", str(prefix), "--ranks", "2"])
    capsys.readouterr()
    assert main(["plan", "--trace", str(prefix), "--algorithm", "ALL_REDUCE=bogus"]) == 2
    assert "unknown algorithm 'bogus'" in capsys.readouterr().err
    assert main(["generate", "moe_mix", "--out", str(prefix), "--expert-parallel-size", "3"]) == 2
    assert "does not divide ranks 8" in capsys.readouterr().err


def test_mismatched_trace_names_files_ranks_and_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from emulator.chakra import pb, write_trace_set
    from emulator.workloads.nodes import NodeWriter, metadata

    ranks = []
    for rank, size in ((0, 1000), (1, 2000)):
        writer = NodeWriter()
        for _ in range(rank + 1):  # ids differ across ranks: rank 1 has a compute node first
            writer.compute("c", 1.0)
        writer.collective("ar", pb.ALL_REDUCE, size, "")
        ranks.append((metadata("test"), writer.nodes))
    write_trace_set(tmp_path / "bad", ranks)
    assert main(["plan", "--trace", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "differs across its ranks" in err
    assert f"rank 0 node 2 ALL_REDUCE 1000 B ({tmp_path}/bad.0.et)" in err
    assert f"rank 1 node 3 ALL_REDUCE 2000 B ({tmp_path}/bad.1.et)" in err
