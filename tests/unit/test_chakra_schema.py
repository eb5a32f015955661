"""The committed generated code is exactly what grpc_tools.protoc makes of the committed schema."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.chakra import COLLECTIVE_NAMES, NODE_TYPE_NAMES, pb

CHAKRA_DIR = Path(__file__).resolve().parents[2] / "emulator" / "chakra"


def test_regenerated_code_is_identical(tmp_path: Path) -> None:
    pytest.importorskip(
        "grpc_tools", reason="grpcio-tools is not installed (pip install -e .[dev])"
    )
    shutil.copy(CHAKRA_DIR / "et_def.proto", tmp_path / "et_def.proto")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(tmp_path / "et_def.proto"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ("et_def_pb2.py", "et_def_pb2.pyi"):
        assert (tmp_path / name).read_bytes() == (CHAKRA_DIR / name).read_bytes(), (
            f"{name} is not what this grpcio-tools makes of et_def.proto: regenerate it (command "
            "in emulator/chakra/__init__.py) or install the pinned grpcio-tools"
        )


def test_schema_numbers_match_design() -> None:
    # docs/architecture.md, "Chakra ET format": NodeType INVALID 0 .. COMM_COLL 7; CollectiveCommType ALL_REDUCE 0 .. BARRIER 9.
    assert NODE_TYPE_NAMES == {
        0: "INVALID_NODE",
        1: "METADATA_NODE",
        2: "MEM_LOAD_NODE",
        3: "MEM_STORE_NODE",
        4: "COMP_NODE",
        5: "COMM_SEND_NODE",
        6: "COMM_RECV_NODE",
        7: "COMM_COLL_NODE",
    }
    assert COLLECTIVE_NAMES[0] == "ALL_REDUCE"
    assert COLLECTIVE_NAMES[6] == "ALL_TO_ALL"
    assert COLLECTIVE_NAMES[9] == "BARRIER"
    assert len(COLLECTIVE_NAMES) == 10
    fields = {f.name: f.number for f in pb.Node.DESCRIPTOR.fields}
    assert fields == {
        "id": 1,
        "name": 2,
        "type": 3,
        "ctrl_deps": 4,
        "data_deps": 5,
        "start_time_micros": 6,
        "duration_micros": 7,
        "inputs": 8,
        "outputs": 9,
        "attr": 10,
    }
    assert pb.Node.DESCRIPTOR.full_name == "ChakraProtoMsg.Node"
