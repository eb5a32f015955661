"""Where a study's runs execute (emulator.studies.pool) and how a run's folder travels back from a
cluster node (emulator.studies.ray_pool.pack / unpack)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from emulator.errors import EnvironmentProblem, InputError
from emulator.studies.pool import LocalPool, check_pool_backend, scenario_run
from emulator.studies.ray_pool import pack, unpack


def _write_run(out_dir: Path) -> Path:
    (out_dir / "plots").mkdir(parents=True)
    (out_dir / "summary.json").write_text('{"ok": true}')
    (out_dir / "plots" / "a.png").write_bytes(b"\x89PNG")
    return out_dir


def test_local_pool_runs_each_at_submit_and_returns_them_in_order(tmp_path: Path) -> None:
    said: list[str] = []
    ran: list[str] = []
    pool = LocalPool(said.append)

    def call(name: str):  # type: ignore[no-untyped-def]
        def run(out_dir: Path) -> Path:
            ran.append(name)
            return _write_run(out_dir)

        return run

    pool.submit("running a", tmp_path / "a", call("a"))
    assert ran == ["a"]  # at once, as a study did before pools
    pool.submit("running b", tmp_path / "b", call("b"))
    assert pool.results() == [tmp_path / "a", tmp_path / "b"]
    assert said == ["running a", "running b"]
    assert pool.results() == []  # taken once


class _Remote:
    remote = True


@pytest.mark.parametrize("backend", ["sim", "flow"])
def test_a_cluster_takes_the_simulated_time_backends(backend: str) -> None:
    check_pool_backend(_Remote(), backend, "x.yaml")  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["netns", "dut", "cluster", "mininet"])
def test_a_cluster_refuses_emulated_runs_naming_the_scenario(backend: str) -> None:
    with pytest.raises(InputError, match=rf"^x\.yaml: --cluster: .*the {backend} backend"):
        check_pool_backend(_Remote(), backend, "x.yaml")  # type: ignore[arg-type]
    check_pool_backend(LocalPool(), backend, "x.yaml")  # here: the backend's own checks decide


def test_scenario_run_drops_the_progress_line_only_elsewhere(tmp_path: Path) -> None:
    from emulator.studies.sensitivity.study import RunSettings

    seen: list[RunSettings] = []

    def runner(scenario: object, out_dir: Path, settings: RunSettings) -> Path:
        seen.append(settings)
        return out_dir

    settings = RunSettings("sim", None, True)
    assert scenario_run(LocalPool(), runner, "s", settings)(tmp_path) == tmp_path
    scenario_run(_Remote(), runner, "s", settings)(tmp_path)  # type: ignore[arg-type]
    assert [s.progress for s in seen] == [True, False]


def test_a_packed_run_unpacks_whole(tmp_path: Path) -> None:
    archive = pack(_write_run(tmp_path / "node" / "run"))
    out = tmp_path / "study" / "runs" / "mixed-seed0"
    unpack(archive, out)
    assert (out / "summary.json").read_text() == '{"ok": true}'
    assert (out / "plots" / "a.png").read_bytes() == b"\x89PNG"
    assert [p.name for p in out.parent.iterdir()] == ["mixed-seed0"]  # no staging left


def test_unpack_never_replaces_a_folder(tmp_path: Path) -> None:
    out = _write_run(tmp_path / "run")
    with pytest.raises(EnvironmentProblem, match="exists already"):
        unpack(pack(out), out)


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _member(
    name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info, data if kind == tarfile.REGTYPE else b""


@pytest.mark.parametrize(
    "member",
    [
        _member("../escaped.txt"),
        _member("./link", kind=tarfile.SYMTYPE),
        _member("./device", kind=tarfile.CHRTYPE),
    ],
    ids=["parent", "link-outside", "device"],
)
def test_an_archive_reaching_outside_its_folder_is_refused_and_leaves_nothing(
    tmp_path: Path, member: tuple[tarfile.TarInfo, bytes]
) -> None:
    out = tmp_path / "study" / "runs" / "bad"
    with pytest.raises(tarfile.FilterError):
        unpack(_tar(_member("./summary.json"), member), out)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # the staging folder is gone
    assert not (tmp_path / "escaped.txt").exists()


def test_an_absolute_member_name_lands_inside_the_folder(tmp_path: Path) -> None:
    out = tmp_path / "study" / "run"
    unpack(_tar(_member(str(tmp_path / "outside.txt"))), out)
    assert not (tmp_path / "outside.txt").exists()
    assert (out / str(tmp_path / "outside.txt").lstrip("/")).read_bytes() == b"x"


def test_a_node_running_other_code_refuses_the_run_before_it_starts(tmp_path: Path) -> None:
    from emulator.studies.ray_pool import run_task

    ran: list[Path] = []

    def call(out_dir: Path) -> Path:
        ran.append(out_dir)
        return out_dir

    with pytest.raises(
        EnvironmentProblem, match=r"runs other code .* the driver's 0000000000000000"
    ):
        run_task(call, "0" * 16)
    assert ran == []
