"""`emulate validate`: human and JSON output of the figures, and scenario files."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from emulator.chakra import pb, write_trace_set
from emulator.cli import main

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


def _set(tmp_path: Path) -> Path:
    """2 ranks: per rank 2 ALL_REDUCE 1 MiB, 1 ALL_TO_ALL, 1 CPU-side coll without comm_type,
    1 send, 1 COMP; 5 data deps and 1 ctrl dep per rank."""
    ranks = []
    for rank in range(2):
        nodes = []
        for i, (kind, size) in enumerate([(0, 1 << 20), (0, 1 << 20), (6, 4096)]):
            node = pb.Node(id=i, type=pb.COMM_COLL_NODE, data_deps=[i - 1] if i else [])
            node.attr.add(name="comm_type", int64_val=kind)
            node.attr.add(name="comm_size", uint64_val=size)
            nodes.append(node)
        nodes.append(pb.Node(id=3, type=pb.COMM_COLL_NODE, data_deps=[2], ctrl_deps=[0]))
        send = pb.Node(id=4, type=pb.COMM_SEND_NODE, data_deps=[3])
        send.attr.add(name="comm_dst", int32_val=1 - rank)
        nodes.append(send)
        nodes.append(pb.Node(id=5, type=pb.COMP_NODE, data_deps=[4]))
        ranks.append((pb.GlobalMetadata(version="0.0.4"), nodes))
    write_trace_set(tmp_path / "job", ranks, {"0": [0, 1]})
    return tmp_path / "job"


def test_json_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _set(tmp_path)
    assert main(["validate", str(prefix), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["sets"]
    (result,) = document["sets"]
    assert list(result) == [
        "prefix",
        "ranks",
        "nodes_by_type",
        "collectives",
        "p2p_nodes",
        "data_deps",
        "ctrl_deps",
        "data_dag",
        "warnings",
    ]
    assert result["prefix"] == str(prefix)
    assert result["ranks"] == 2
    assert result["nodes_by_type"]["COMM_COLL_NODE"] == 8
    assert result["nodes_by_type"]["COMM_SEND_NODE"] == 2
    assert result["nodes_by_type"]["COMP_NODE"] == 2
    assert result["nodes_by_type"]["INVALID_NODE"] == 0
    assert result["collectives"] == [
        {"type": "ALL_REDUCE", "bytes": 1048576, "count": 4},
        {"type": "ALL_TO_ALL", "bytes": 4096, "count": 2},
        {"type": None, "bytes": None, "count": 2},
    ]
    assert result["p2p_nodes"] == 2
    assert result["data_deps"] == 10
    assert result["ctrl_deps"] == 2
    assert result["data_dag"] is True
    assert result["warnings"] == []


def test_one_set_per_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _set(tmp_path)
    assert main(["validate", str(prefix), f"{prefix}.1.et", "--json"]) == 0
    sets = json.loads(capsys.readouterr().out)["sets"]
    assert [s["ranks"] for s in sets] == [2, 1]
    assert sets[1]["prefix"] == f"{prefix}.1.et"


def test_human_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _set(tmp_path)
    assert main(["validate", str(prefix)]) == 0
    out = capsys.readouterr().out
    assert f"{prefix}: 2 rank(s), 6 node(s) per rank" in out
    assert "nodes by type: COMP_NODE 2, COMM_SEND_NODE 2, COMM_COLL_NODE 8" in out
    assert "    ALL_REDUCE 1048576 B x4\n" in out
    assert "    (no comm_type) (no comm_size) x2\n" in out
    assert "send/recv nodes: 2" in out
    assert "data deps: 10 edge(s), acyclic: yes" in out
    assert f"comm groups: 1 from {prefix}.comm_groups.json" in out
    assert "warnings: none" in out


@pytest.mark.skipif(not TRACES.is_dir(), reason=f"real traces folder {TRACES} is absent")
def test_real_trace_with_c10d_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    prefix = TRACES / "mlcommons-chakra/tests/data/chakra"
    assert main(["validate", "--json", str(prefix)]) == 0
    (result,) = json.loads(capsys.readouterr().out)["sets"]
    assert {"type": None, "bytes": None, "count": 14} in result["collectives"]
    assert result["data_deps"] == 181878
    assert result["data_dag"] is True
    assert any("383 node(s) list themselves in ctrl_deps" in w for w in result["warnings"])


def _fake_scenario_module(monkeypatch: pytest.MonkeyPatch, loader: Any) -> None:
    module = types.ModuleType("emulator.scenario")
    module.load_scenario = loader  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "emulator.scenario", module)


def test_scenario_names_its_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = _set(tmp_path)
    scenario_path = tmp_path / "s.yaml"

    def load_scenario(path: str) -> Any:
        assert path == str(scenario_path)
        workload = types.SimpleNamespace(trace="job", comm_groups=None, name="s")
        return types.SimpleNamespace(
            jobs=(workload,), several_jobs=False, resolve=lambda rel: Path(path).parent / rel
        )

    _fake_scenario_module(monkeypatch, load_scenario)
    assert main(["validate", str(scenario_path), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["sets"]
    assert result["prefix"] == str(prefix)
    assert result["ranks"] == 2


def test_scenario_without_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def load_scenario(path: str) -> Any:
        job = types.SimpleNamespace(trace=None, comm_groups=None, name="gen")
        return types.SimpleNamespace(jobs=(job,), several_jobs=False, resolve=Path)

    _fake_scenario_module(monkeypatch, load_scenario)
    assert main(["validate", str(tmp_path / "gen.yml")]) == 0
    assert "workload is generated" in capsys.readouterr().out


def test_scenario_loader_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "emulator.scenario", None)  # import raises ImportError
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "scenario validation not available yet" in err
