"""MLCommons Chakra execution traces: schema, reader, writer, and what `emulate validate` reports.

`pb` is the module protoc generated from et_def.proto, a verbatim copy of mlcommons/chakra
schema/protobuf/et_def.proto @ f5124d76bb7c3ba2ad67cb8386ad0f450a88e88e (package ChakraProtoMsg).
Regenerate it from the repository root with

    .venv/bin/python -m grpc_tools.protoc -Iemulator/chakra --python_out=emulator/chakra \
        --pyi_out=emulator/chakra emulator/chakra/et_def.proto

(tests/unit/test_chakra_schema.py checks the committed files are exactly that output).
"""

from __future__ import annotations

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.attrs import (
    attr_int,
    attr_value,
    comm_dst,
    comm_size,
    comm_src,
    comm_tag,
    comm_type,
    is_cpu_op,
    pg_name,
)
from emulator.chakra.depindex import DepEdges, DepIndex, build_index, is_acyclic
from emulator.chakra.names import COLLECTIVE_NAMES, NODE_TYPE_NAMES
from emulator.chakra.reader import RankTrace, iter_records, read_rank
from emulator.chakra.traceset import TraceSet, load_trace_set
from emulator.chakra.writer import encode_rank, write_rank, write_trace_set

__all__ = [
    "COLLECTIVE_NAMES",
    "NODE_TYPE_NAMES",
    "DepEdges",
    "DepIndex",
    "RankTrace",
    "TraceSet",
    "attr_int",
    "attr_value",
    "build_index",
    "comm_dst",
    "comm_size",
    "comm_src",
    "comm_tag",
    "comm_type",
    "encode_rank",
    "is_acyclic",
    "is_cpu_op",
    "iter_records",
    "load_trace_set",
    "pb",
    "pg_name",
    "read_rank",
    "write_rank",
    "write_trace_set",
]
