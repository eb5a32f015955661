"""Bad trace input through the CLI: one stderr line naming the file, exit code 2, no traceback."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import cast

import pytest

from emulator.chakra import pb, read_rank, write_rank, write_trace_set
from emulator.cli import main
from emulator.errors import TraceError


def _node(node_id: int, node_type: int = pb.COMP_NODE, deps: tuple[int, ...] = ()) -> pb.Node:
    return pb.Node(
        id=node_id, name=f"n{node_id}", type=cast(pb.NodeType, node_type), data_deps=deps
    )


def _good_trace(path: Path) -> Path:
    nodes = [_node(i, deps=(i - 1,) if i else ()) for i in range(20)]
    return write_rank(path, pb.GlobalMetadata(version="0.0.4"), nodes)


def _run_bad(capsys: pytest.CaptureFixture[str], path: Path, *needles: str) -> str:
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    assert str(path) in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_truncated_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good_trace(tmp_path / "good.0.et").read_bytes()
    bad = tmp_path / "cut.0.et"
    bad.write_bytes(good[: len(good) - 3])
    line = _run_bad(capsys, bad, "record 20", "truncated")
    assert "only" in line


def test_random_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "noise.et"
    bad.write_bytes(random.Random(20260522).randbytes(4096))
    _run_bad(capsys, bad)


@pytest.mark.parametrize(
    "prefix",
    [b"\xff" * 11, b"\x80\x80\x80\x80\x80\x00"],
    ids=["ten-plus-bytes", "six-bytes"],
)
def test_over_long_varint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], prefix: bytes
) -> None:
    good = _good_trace(tmp_path / "good.0.et").read_bytes()
    bad = tmp_path / "varint.et"
    bad.write_bytes(good + prefix + b"\x08\x01")
    _run_bad(capsys, bad, "over-long varint", "record 21")


def test_length_prefix_past_end_of_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "past.et"
    bad.write_bytes(b"\x00" + b"\x7f" + b"\x08\x01")
    _run_bad(capsys, bad, "record 1 at byte 1", "127 bytes")


def test_unknown_node_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [_node(1), _node(77, node_type=42), _node(3)]
    bad = write_rank(tmp_path / "enum.et", pb.GlobalMetadata(), nodes)
    _run_bad(capsys, bad, "node 77", "unknown NodeType 42")


def test_missing_rank_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ranks = [(pb.GlobalMetadata(), [_node(1)]) for _ in range(4)]
    paths = write_trace_set(tmp_path / "set", ranks)
    paths[2].unlink()
    code = main(["validate", str(tmp_path / "set")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert f"{tmp_path / 'set'}.2.et: missing rank file" in err
    assert "found ranks 0, 1, 3" in err


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "empty.0.et"
    bad.write_bytes(b"")
    _run_bad(capsys, bad, "empty file")


def test_directory_instead_of_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    _run_bad(capsys, folder, "is a directory")


def test_rank_file_that_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _good_trace(tmp_path / "set.0.et")
    (tmp_path / "set.1.et").mkdir()
    line = _run_bad(capsys, tmp_path / "set", "is a directory")
    assert "set.1.et" in line


def test_invalid_node_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _good_trace(tmp_path / "good.0.et").read_bytes()
    bad = tmp_path / "record.et"
    # A 2-byte record: tag of field 1 with wire type 7, which does not exist.
    bad.write_bytes(good + b"\x02\x0f\x01")
    _run_bad(capsys, bad, "record 21", "not a valid Node")


def test_no_such_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _run_bad(capsys, tmp_path / "nothing", "no rank files")


def test_corrupt_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = gzip.compress(_good_trace(tmp_path / "good.0.et").read_bytes())
    bad = tmp_path / "bad.0.et.gz"
    bad.write_bytes(data[: len(data) // 2])
    _run_bad(capsys, bad, "corrupt gzip")


def test_gz_name_without_gzip_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "plain.0.et.gz"
    bad.write_bytes(_good_trace(tmp_path / "good.0.et").read_bytes())
    _run_bad(capsys, bad, "not gzip data")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"workload_graph": [{"Id": 1, "NodeType": 4}, {"Name": "x"}]}', "workload_graph[1]"),
        ('{"workload_graph": [{"Id": 5, "NodeType": 4, "data_deps": "1"}]}', "node 5"),
        ('{"workload_graph": [{"Id": 5, "NodeType": 99}]}', "unknown NodeType 99"),
        ('{"version": "1"}{"id": "3", "type": "NO_SUCH_NODE"}', "object 1 (Node)"),
        ('{"version": "1"}{"id": ', "invalid JSON"),
    ],
)
def test_bad_json_forms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    bad = tmp_path / "bad.0.json"
    bad.write_text(text)
    _run_bad(capsys, bad, needle)


def test_explicit_comm_groups_must_be_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _good_trace(tmp_path / "set.0.et")
    groups = tmp_path / "groups.json"
    groups.write_text('{"0": [0, "one"]}')
    code = main(["validate", str(tmp_path / "set"), "--comm-groups", str(groups)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert str(groups) in err


def test_explicit_comm_groups_beyond_world_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _good_trace(tmp_path / "set.0.et")
    groups = tmp_path / "groups.json"
    groups.write_text('{"0": [0, 1]}')
    code = main(["validate", str(tmp_path / "set"), "--comm-groups", str(groups)])
    err = capsys.readouterr().err
    assert code == 2
    assert "names rank(s) [1] but the set has 1 rank(s)" in err


def test_one_bad_path_does_not_hide_the_good_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _good_trace(tmp_path / "good.0.et")
    empty = tmp_path / "empty.et"
    empty.write_bytes(b"")
    code = main(["validate", str(good), str(empty)])
    captured = capsys.readouterr()
    assert code == 2
    assert f"{good}: 1 rank(s), 20 node(s) per rank" in captured.out
    assert captured.err.count("\n") == 1
    assert str(empty) in captured.err


def test_reader_raises_trace_error_not_library_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.et"
    bad.write_bytes(b"\x03\x0a\x01")  # metadata whose string field runs past its record
    with pytest.raises(TraceError, match="GlobalMetadata record at byte 0"):
        read_rank(bad)
