"""Every real trace under ../shared/traces loads, and validate's figures match SOURCES.md.

The expectations are parsed from the "Measured contents" table of SOURCES.md (not transcribed),
so the table and the reader cannot drift apart silently.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from emulator.chakra import encode_rank, load_trace_set, read_rank
from emulator.chakra.summary import summarize

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
EXPECTED_FILES = 361

pytestmark = pytest.mark.skipif(
    not TRACES.is_dir(), reason=f"real traces folder {TRACES} is absent"
)

ABBREVIATIONS = {
    "COLL": "COMM_COLL_NODE",
    "COMP": "COMP_NODE",
    "SEND": "COMM_SEND_NODE",
    "RECV": "COMM_RECV_NODE",
    "META": "METADATA_NODE",
    "MEMLD": "MEM_LOAD_NODE",
    "MEMST": "MEM_STORE_NODE",
}


def _table_rows() -> list[dict[str, str]]:
    text = (TRACES / "SOURCES.md").read_text(encoding="utf-8")
    section = text.split("## Measured contents", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:  # skip the header and the |---| line
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


ROWS = _table_rows() if TRACES.is_dir() else []


def _column(row: dict[str, str], start: str) -> str:
    (key,) = [k for k in row if k.startswith(start)]
    return row[key]


def _expected_types(cell: str) -> dict[str, int]:
    counts = {}
    for part in cell.split(","):
        abbrev, number = part.split()
        counts[ABBREVIATIONS[abbrev]] = int(number)
    return counts


def _expected_collectives(cell: str) -> Counter[tuple[str | None, int | None]]:
    found: Counter[tuple[str | None, int | None]] = Counter()
    if cell == "-":
        return found
    for part in cell.split(";"):
        match = re.fullmatch(r"(\w+) (\w+) ×(\d+)", part.strip())
        assert match, part
        kind, size, count = match.groups()
        key = (None if kind == "None" else kind, None if size == "None" else int(size))
        found[key] += int(count)
    return found


def test_table_covers_every_trace_file() -> None:
    files = sorted(TRACES.rglob("*.et"))
    assert len(files) == EXPECTED_FILES
    assert sum(int(row["ranks"]) for row in ROWS) == EXPECTED_FILES
    assert len(ROWS) == 40


def test_every_file_loads_and_rewrites_to_the_same_bytes() -> None:
    files = sorted(TRACES.rglob("*.et"))
    assert len(files) == EXPECTED_FILES
    total_nodes = 0
    for path in files:
        trace = read_rank(path)
        total_nodes += len(trace.nodes)
        assert encode_rank(trace.metadata, trace.nodes) == path.read_bytes(), path
    assert total_nodes > 3664


@pytest.mark.parametrize("row", ROWS, ids=[row["rank set (`<prefix>.<rank>.et`)"] for row in ROWS])
def test_validate_figures_match_sources_table(row: dict[str, str]) -> None:
    prefix = row["rank set (`<prefix>.<rank>.et`)"].strip("`")
    trace_set = load_trace_set(TRACES / prefix)
    summary = summarize(trace_set)

    assert summary.ranks == int(row["ranks"])
    per_rank = [int(n) for n in _column(row, "nodes/rank").split("-")]
    assert summary.nodes_per_rank == (per_rank[0], per_rank[-1])
    assert {k: v for k, v in summary.nodes_by_type.items() if v} == _expected_types(
        _column(row, "node types")
    )
    collectives = Counter({(c.type, c.bytes): c.count for c in summary.collectives})
    assert collectives == _expected_collectives(_column(row, "collectives"))
    assert summary.p2p_nodes == int(row["p2p nodes"])
    assert summary.data_deps == int(row["data-dep edges"])
    assert summary.ctrl_deps == int(row["ctrl-dep edges"])
    data_dag, all_dag = (part.strip() for part in _column(row, "DAG").split("/"))
    assert summary.data_dag is (data_dag == "yes")
    assert summary.data_ctrl_dag is (all_dag == "yes")

    metadata = _column(row, "GlobalMetadata")
    version = re.match(r"version='([^']*)'", metadata)
    assert version, metadata
    assert summary.metadata_version == version.group(1)
    attrs = metadata.split("attr: ", 1)[1].split(", ") if "attr: " in metadata else []
    assert list(summary.metadata_attrs) == attrs


def test_chakra_feeder_json_matches_the_et() -> None:
    et = read_rank(TRACES / "mlcommons-chakra/tests/data/chakra.0.et")
    js = read_rank(TRACES / "mlcommons-chakra/jsonData/chakra.0.json")
    assert len(js.nodes) == len(et.nodes) == 3664
    for a, b in zip(et.nodes, js.nodes, strict=True):
        assert (a.id, a.type, list(a.data_deps)) == (b.id, b.type, list(b.data_deps))
        # SOURCES.md: runtimes match too (157 nodes omit `runtime`, meaning 0)
        assert a.duration_micros == b.duration_micros


def test_small_feeder_json_keeps_ctrl_deps() -> None:
    small = read_rank(TRACES / "mlcommons-chakra/jsonData/small_chakra.0.json")
    assert [n.id for n in small.nodes] == [216, 217, 430, 432, 433, 435, 541]
    assert [list(n.ctrl_deps) for n in small.nodes][:3] == [[3], [3], [429]]
    assert list(small.nodes[5].data_deps) == [432, 216, 217]


@pytest.mark.parametrize(
    ("json_name", "et_path"),
    [
        (
            "MLP_ModelParallel.0.json",
            "astra-sim-tutorials/micro2024/astra-sim-demo/demo2/workload/MLP_ModelParallel.0.et",
        ),
        (
            "custom_allreduce.0.json",
            "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/"
            "custom_allreduce.0.et",
        ),
    ],
)
def test_jsonizer_output_equals_its_source(json_name: str, et_path: str) -> None:
    js = read_rank(TRACES / "chakra-generated/jsonizer" / json_name)
    et = read_rank(TRACES / et_path)
    assert js.metadata == et.metadata
    assert js.nodes == et.nodes
    assert len(js.nodes) in (29, 35)


def test_comm_groups_found_next_to_the_traces() -> None:
    t2d = load_trace_set(TRACES / "astra-sim-artifacts/examples/T2D-analytical/trace/trace")
    assert t2d.comm_groups_path is not None
    assert t2d.comm_groups_path.name == "comm_group.json"
    assert len(t2d.comm_groups) == 8
    stg = load_trace_set(TRACES / "stg-generated/dp2_tp2_pp2_gpt_4layers/workload")
    assert stg.comm_groups["1"] == (0, 1)
    assert stg.comm_groups["8"] == (5, 7)
    assert stg.comm_groups["16"] == (7,)
