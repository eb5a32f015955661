"""Reader and writer: round trips, the forms a trace takes, what real traces need tolerated."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from emulator.chakra import (
    comm_dst,
    comm_size,
    comm_type,
    delimited,
    encode_rank,
    is_acyclic,
    is_cpu_op,
    iter_records,
    load_trace_set,
    pb,
    pg_name,
    read_rank,
    write_rank,
    write_trace_set,
)
from emulator.errors import TraceError


def _rich_nodes() -> list[pb.Node]:
    """Nodes using every part of the schema: deps, timing, IOInfo, attrs of several kinds."""
    nodes = []
    for i in range(6):
        node = pb.Node(
            id=10 + i,
            name=f"op{i}",
            type=pb.COMM_COLL_NODE if i % 2 else pb.COMP_NODE,
            start_time_micros=i,
            duration_micros=7 * i,
        )
        node.data_deps.extend(range(10, 10 + i))
        node.ctrl_deps.append(10)
        node.inputs.values = "[[1, 2]]"
        node.outputs.shapes = "[[4]]"
        node.attr.add(name="comm_type", int64_val=i % 3)
        node.attr.add(name="comm_size", uint64_val=1 << (10 + i))
        node.attr.add(name="is_cpu_op", int32_val=i % 2)
        node.attr.add(name="ratios", double_list=pb.DoubleList(values=[0.5, 1.5]))
        node.attr.add(name="empty")  # oneof left unset, as STG writes `inputs`/`outputs`
        nodes.append(node)
    return nodes


METADATA = pb.GlobalMetadata(version="0.0.4")
METADATA.attr.add(name="schema", string_val="test")


def test_round_trip_is_byte_identical(tmp_path: Path) -> None:
    nodes = _rich_nodes()
    path = write_rank(tmp_path / "rt.0.et", METADATA, nodes)
    trace = read_rank(path)
    assert trace.metadata == METADATA
    assert list(trace.nodes) == nodes
    assert encode_rank(trace.metadata, trace.nodes) == path.read_bytes()
    # The bytes are Chakra's encodeMessage format: varint32 length, then the message.
    data = path.read_bytes()
    first = METADATA.SerializeToString()
    assert data[0] == len(first)
    assert data[1 : 1 + len(first)] == first


def test_gzip_round_trip_and_deterministic_bytes(tmp_path: Path) -> None:
    nodes = _rich_nodes()
    a = write_rank(tmp_path / "a.0.et.gz", METADATA, nodes)
    b = write_rank(tmp_path / "b.0.et.gz", METADATA, nodes)
    assert a.read_bytes()[:2] == b"\x1f\x8b"
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()) == encode_rank(METADATA, nodes)
    assert list(read_rank(a).nodes) == nodes


def test_gzip_is_recognised_whatever_the_name(tmp_path: Path) -> None:
    path = tmp_path / "x.0.et"
    path.write_bytes(gzip.compress(encode_rank(METADATA, _rich_nodes())))
    assert len(read_rank(path).nodes) == 6


def test_trace_set_with_comm_groups(tmp_path: Path) -> None:
    ranks = [(METADATA, [pb.Node(id=r, type=pb.COMM_COLL_NODE)]) for r in range(4)]
    paths = write_trace_set(tmp_path / "job", ranks, {"0": [0, 1], "1": [2, 3]})
    assert [p.name for p in paths] == [
        "job.0.et",
        "job.1.et",
        "job.2.et",
        "job.3.et",
        "job.comm_groups.json",
    ]
    trace_set = load_trace_set(tmp_path / "job")
    assert trace_set.world_size == 4
    assert [r.rank for r in trace_set.ranks] == [0, 1, 2, 3]
    assert [r.nodes[0].id for r in trace_set.ranks] == [0, 1, 2, 3]
    assert trace_set.comm_groups == {"0": (0, 1), "1": (2, 3)}
    assert trace_set.comm_groups_path == tmp_path / "job.comm_groups.json"
    assert trace_set.warnings == ()


def test_gzip_trace_set_and_single_file(tmp_path: Path) -> None:
    ranks = [(METADATA, _rich_nodes()) for _ in range(3)]
    paths = write_trace_set(tmp_path / "z", ranks, gzip=True)
    assert [p.name for p in paths] == ["z.0.et.gz", "z.1.et.gz", "z.2.et.gz"]
    assert load_trace_set(tmp_path / "z").world_size == 3
    single = load_trace_set(paths[2])
    assert single.world_size == 1
    assert single.ranks[0].rank == 0  # a single file is a one-rank set of its own


def test_two_files_for_one_rank_is_an_error(tmp_path: Path) -> None:
    write_rank(tmp_path / "d.0.et", METADATA, [])
    write_rank(tmp_path / "d.0.et.gz", METADATA, [])
    with pytest.raises(TraceError, match="rank 0 has two files"):
        load_trace_set(tmp_path / "d")


def test_comm_groups_file_named_explicitly_wins(tmp_path: Path) -> None:
    write_trace_set(tmp_path / "j", [(METADATA, [])] * 2, {"0": [0, 1]})
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"7.0": [1]}))
    trace_set = load_trace_set(tmp_path / "j", comm_groups=other)
    assert trace_set.comm_groups == {"7": (1,)}  # '7.0' normalised like pg_name


def test_invalid_comm_group_candidate_is_ignored(tmp_path: Path) -> None:
    write_trace_set(tmp_path / "j", [(METADATA, [])] * 2)
    (tmp_path / "workload.json").write_text('{"workload_graph": []}')
    trace_set = load_trace_set(tmp_path / "j")
    assert trace_set.comm_groups == {}
    assert trace_set.comm_groups_path is None


def test_process_groups_from_pytorch_metadata_node(tmp_path: Path) -> None:
    init = pb.Node(id=3, name="## process_group:init ##", type=pb.METADATA_NODE)
    groups = [
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1]},
        {"pg_name": "1", "pg_desc": "tp", "ranks": [1]},
    ]
    init.inputs.values = str([json.dumps(groups)])  # Python repr around the JSON, as converted
    write_trace_set(tmp_path / "pt", [(METADATA, [init])] * 2)
    assert load_trace_set(tmp_path / "pt").comm_groups == {"0": (0, 1), "1": (1,)}


def test_tolerated_oddities_become_warnings(tmp_path: Path) -> None:
    nodes = [
        pb.Node(id=1, type=pb.COMP_NODE, data_deps=[2], ctrl_deps=[1, 999]),  # forward ref
        pb.Node(id=2, type=pb.COMP_NODE, data_deps=[555]),  # dangling data dep
        pb.Node(id=2, type=pb.COMP_NODE),  # duplicate id
    ]
    data = encode_rank(METADATA, nodes)
    first_node = 1 + len(METADATA.SerializeToString())
    # Two zero-length records (empty nodes) in front of the first node.
    path = tmp_path / "odd.et"
    path.write_bytes(data[:first_node] + b"\x00\x00" + data[first_node:])
    trace = read_rank(path)
    assert [n.id for n in trace.nodes] == [1, 2, 2]
    text = "\n".join(trace.warnings)
    assert "2 zero-length node record(s) skipped" in text
    assert "1 data_deps point to node ids not in the file (e.g. node 2 -> 555)" in text
    assert "1 ctrl_deps point to node ids not in the file (e.g. node 1 -> 999)" in text
    assert "1 node(s) list themselves in ctrl_deps (e.g. 1)" in text
    assert "1 node id(s) used by more than one node (e.g. 2)" in text
    index = trace.index
    assert index.data.pos.tolist() == [1, -1]  # the forward reference resolves
    assert index.position(2) == 1  # duplicates resolve to the first
    assert is_acyclic([index.data])
    assert not is_acyclic([index.data, index.ctrl])


def test_data_cycle_is_detected() -> None:
    from emulator.chakra import build_index

    nodes = [
        pb.Node(id=1, data_deps=[3]),
        pb.Node(id=2, data_deps=[1]),
        pb.Node(id=3, data_deps=[2]),
        pb.Node(id=4, data_deps=[3]),
    ]
    index = build_index(nodes)
    assert not is_acyclic([index.data])
    nodes[0].ClearField("data_deps")
    assert is_acyclic([build_index(nodes).data])


def test_index_children_and_indegree() -> None:
    from emulator.chakra import build_index

    nodes = [
        pb.Node(id=7, data_deps=[]),
        pb.Node(id=5, data_deps=[7]),
        pb.Node(id=9, data_deps=[7, 5, 42]),
    ]
    edges = build_index(nodes).data
    assert edges.count == 4
    assert edges.indegree.tolist() == [0, 1, 2]
    child_ptr, children = edges.children
    assert child_ptr.tolist() == [0, 2, 3, 3]
    assert children.tolist() == [1, 2, 2]
    assert edges.deps_of(2).tolist() == [7, 5, 42]
    assert np.flatnonzero(edges.dangling).tolist() == [3]


def test_streaming_yields_the_same_nodes(tmp_path: Path) -> None:
    nodes = _rich_nodes()
    path = write_rank(tmp_path / "s.et", METADATA, nodes)
    assert list(iter_records(path)) == nodes


def test_many_batches_and_bad_record_in_a_later_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delimited, "BATCH_RECORDS", 4)
    nodes = [pb.Node(id=i, type=pb.COMP_NODE, data_deps=[i - 1] if i else []) for i in range(30)]
    path = write_rank(tmp_path / "b.et", METADATA, nodes)
    assert list(read_rank(path).nodes) == nodes
    path.write_bytes(path.read_bytes() + b"\x02\x0f\x01" + encode_rank(METADATA, nodes[:2])[1:])
    with pytest.raises(TraceError, match=r"record 31 at byte \d+ is not a valid Node"):
        read_rank(path)


def test_feeder_json_with_comm_attributes(tmp_path: Path) -> None:
    path = tmp_path / "f.0.json"
    path.write_text(
        json.dumps(
            {
                "workload_graph": [
                    {"Id": 1, "Name": "c", "NodeType": 7, "comm_type": 6, "comm_size": 4096.0},
                    {"Id": 2, "Name": "s", "NodeType": 5, "comm_dst": 3, "is_cpu_op": 0},
                    {"Id": 3, "Name": "x", "NodeType": 4, "data_deps": [1, 2], "runtime": 9},
                ]
            }
        )
    )
    nodes = read_rank(path).nodes
    assert (comm_type(nodes[0]), comm_size(nodes[0])) == (6, 4096)
    assert comm_dst(nodes[1]) == 3
    assert is_cpu_op(nodes[1]) is False
    assert list(nodes[2].data_deps) == [1, 2]
    assert nodes[2].duration_micros == 9


def test_jsonizer_form_round_trips_to_the_same_messages(tmp_path: Path) -> None:
    from google.protobuf import json_format

    nodes = _rich_nodes()
    text = "".join(json_format.MessageToJson(m) for m in [METADATA, *nodes])
    assert "}{" in text  # concatenated without separators, as chakra_jsonizer writes
    path = tmp_path / "j.0.json"
    path.write_text(text)
    trace = read_rank(path)
    assert trace.metadata == METADATA
    assert list(trace.nodes) == nodes
    assert pg_name(trace.nodes[0]) is None


def test_streaming_in_small_batches_stops_at_the_bad_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delimited, "STREAM_BATCH_RECORDS", 3)
    nodes = [pb.Node(id=i, type=pb.COMP_NODE) for i in range(10)]
    path = write_rank(tmp_path / "s.et", METADATA, nodes)
    assert list(iter_records(path)) == nodes
    path.write_bytes(path.read_bytes() + b"\x02\x0f\x01")
    seen = []
    with pytest.raises(TraceError, match="record 11 at byte"):
        for node in iter_records(path):
            seen.append(node.id)
    assert seen == list(range(9))  # the three full batches before the bad one
