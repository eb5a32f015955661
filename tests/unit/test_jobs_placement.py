"""Several jobs on one fabric: placements that parse or not, hosts given twice, jobs that do not
fit, and each bad input refused in one line naming the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.scenario.jobs import JobSpec, format_hosts, parse_hosts, place_jobs
from emulator.workloads.params import AllreduceParams

FABRIC = "fabric: {kind: clos, hosts_per_leaf: 4, leaves: 2, spines: 1, host_link_gbps: 100}\n"


def job(name: str = "", hosts: str | tuple[int, ...] | None = None, **kw: object) -> JobSpec:
    return JobSpec(generate=AllreduceParams(ranks=4), name=name, hosts=hosts, **kw)  # type: ignore[arg-type]


def write(tmp_path: Path, jobs_yaml: str, fabric: str = FABRIC) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\nworkloads:\n{jobs_yaml}{fabric}run: {{backend: sim}}\n")
    return path


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)),
        ("5", (5,)),
        (" 2 - 3 , 0 ", (2, 3, 0)),
        ((3, 1, 2), (3, 1, 2)),
    ],
)
def test_hosts_parse_as_lists_and_ranges_in_rank_order(
    text: str | tuple[int, ...], hosts: tuple[int, ...]
) -> None:
    assert parse_hosts(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0-x", "does not parse"),
        ("", "does not parse"),
        ("3-1", "runs backwards"),
        ("0,1,1", "listed twice"),
        ((0, -1), "not a host index"),
        ((), "empty"),
        ("0-99999999", "beyond any fabric"),
    ],
)
def test_bad_placements_say_why(text: str | tuple[int, ...], why: str) -> None:
    with pytest.raises(ValueError, match=f"^hosts: .*{why}"):
        parse_hosts(text)


def test_format_hosts_writes_ranges_in_order() -> None:
    assert format_hosts((0, 1, 2, 3, 8, 9)) == "0-3,8-9"
    assert format_hosts((0, 8, 1, 9)) == "0,8,1,9"
    assert parse_hosts(format_hosts((4, 5, 6, 12, 13))) == (4, 5, 6, 12, 13)


def test_jobs_without_hosts_take_the_lowest_free_ones_in_order() -> None:
    jobs = [job("a"), job("b", "0-3"), job("c")]
    placed = place_jobs(jobs, [4, 4, 2], 12)
    assert [(p.name, p.hosts) for p in placed] == [
        ("a", (4, 5, 6, 7)),
        ("b", (0, 1, 2, 3)),
        ("c", (8, 9)),
    ]


@pytest.mark.parametrize(
    ("jobs", "ranks", "message"),
    [
        (
            [job("a", "0-2")],
            [4],
            r"workloads\[0\]\.hosts: job a has 4 ranks but 3 hosts are listed",
        ),
        ([job("a", "4-7")], [4], r"workloads\[0\]\.hosts: host 6 of job a is not on the fabric"),
        (
            [job("a"), job("b")],
            [4, 4],
            r"workloads\[1\]\.hosts: job b has 4 ranks but only 2 of the fabric's 6 hosts",
        ),
    ],
)
def test_a_job_larger_than_the_fabric_is_refused_naming_the_key(
    jobs: list[JobSpec], ranks: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        place_jobs(jobs, ranks, 6)


def test_a_host_given_to_two_jobs_is_one_line_naming_the_key_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "  - {name: a, generate: {kind: allreduce, ranks: 4}, hosts: '0-3'}\n"
        "  - {name: b, generate: {kind: allreduce, ranks: 4}, hosts: [3, 4, 5, 6]}\n",
    )
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"{path}:")
    assert "workloads[1].hosts: host 3 is also given to workloads[0] (a)" in text


def test_a_placement_that_does_not_parse_names_its_key_and_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "  - {name: a, generate: {kind: allreduce, ranks: 4}}\n"
        "  - name: b\n    generate: {kind: allreduce, ranks: 4}\n    hosts: 4-x\n",
    )
    with pytest.raises(ScenarioError, match=rf"^{path}:6: workloads\[1\]\.hosts: '4-x'"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("jobs_yaml", "message"),
    [
        (
            "  - {name: a, generate: {kind: allreduce, ranks: 4}}\n"
            "  - {name: a, generate: {kind: allreduce, ranks: 2}}\n",
            r"workloads\[1\]\.name: 'a' is also workloads\[0\]",
        ),
        (
            "  - {name: 'a b', generate: {kind: allreduce, ranks: 4}}\n",
            r"workloads\[0\]\.name: 'a b' may hold",
        ),
        ("  - {name: a, hosts: '0-3'}\n", r"workloads\[0\]\.trace: a workload needs"),
        ("  - {name: a, generate: {kind: allreduce}, start_us: -1}\n", r"start_us: -1 us must"),
    ],
)
def test_other_bad_jobs_are_refused_naming_the_key(
    tmp_path: Path, jobs_yaml: str, message: str
) -> None:
    with pytest.raises(ScenarioError, match=message) as exc:
        load_scenario(write(tmp_path, jobs_yaml))
    assert "\n" not in str(exc.value)


def test_workload_and_workloads_together_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "  - {generate: {kind: allreduce, ranks: 4}}\n")
    path.write_text(path.read_text() + "workload: {generate: {kind: allreduce, ranks: 4}}\n")
    with pytest.raises(ScenarioError, match="workloads: give either `workload` or `workloads`"):
        load_scenario(path)


@pytest.mark.parametrize("command", ["run", "plan", "validate"])
def test_a_job_larger_than_the_fabric_fails_every_command_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = write(
        tmp_path,
        "  - {name: a, generate: {kind: allreduce, ranks: 4}, hosts: '0-3'}\n"
        "  - {name: big, generate: {kind: allreduce, ranks: 6}}\n",
    )
    args = [command, str(path)] + (["--out", str(tmp_path / "r")] if command == "run" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "workloads[1].hosts: job big has 6 ranks but only 4 of the fabric's 8 hosts" in err
    assert not (tmp_path / "r").exists()  # nothing half-written


def test_one_workload_is_a_job_named_after_the_scenario_and_with_jobs_pins_hosts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(f"name: one\nworkload: {{generate: {{kind: allreduce, ranks: 4}}}}\n{FABRIC}")
    scenario = load_scenario(path)
    (only,) = scenario.jobs
    assert only.name == "one" and only.hosts is None and not scenario.several_jobs
    alone = scenario.with_jobs({"one": (4, 5, 6, 7)})
    assert alone.workload is None and alone.several_jobs
    assert alone.workloads == (dataclasses.replace(only, hosts=(4, 5, 6, 7)),)
    two = load_scenario(
        write(
            tmp_path,
            "  - {generate: {kind: allreduce, ranks: 2}, iterations: 2}\n"
            "  - {name: x, generate: {kind: allreduce, ranks: 2}}\n",
        )
    )
    assert [j.name for j in two.jobs] == ["job0", "x"]
    assert [j.iterations for j in two.with_iterations(3).jobs] == [3, 3]
    # a one-workload scenario's name is free text: its job takes it as it is
    spaced = tmp_path / "spaced.yaml"
    spaced.write_text(f"name: my mix\nworkload: {{generate: {{kind: allreduce}}}}\n{FABRIC}")
    assert [j.name for j in load_scenario(spaced).jobs] == ["my mix"]
