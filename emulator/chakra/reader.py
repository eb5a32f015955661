"""Read one rank's trace file in any supported form: `.et`, `.et.gz`, feeder JSON, jsonizer JSON.

The form is chosen by the file name (a registry keyed by suffix); gzip is recognised by its magic
bytes whatever the name. Everything that goes wrong becomes a TraceError naming the file (and the
record or node id where known); tolerated oddities of real traces become warnings.
"""

from __future__ import annotations

import gc
import gzip
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.delimited import iter_delimited, parse_delimited
from emulator.chakra.depindex import DepEdges, DepIndex, build_index
from emulator.chakra.jsonforms import parse_json_text
from emulator.chakra.names import NODE_TYPE_NAMES, one_line
from emulator.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
# `<prefix>.<rank>.et`, `.et.gz`, `.json` -> rank number (used when a single file is read).
RANK_IN_NAME = re.compile(r"\.(\d+)\.(?:et|et\.gz|json|json\.gz)$")
# Examples quoted in a warning.
_EXAMPLES = 3

Parsed = tuple[pb.GlobalMetadata, list[pb.Node], list[str]]


def _parse_json(data: bytes, source: str) -> Parsed:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{source}: not UTF-8 text at byte {exc.start}") from None
    metadata, nodes = parse_json_text(text, source)
    return metadata, nodes, []


# Suffix of the (decompressed) file name -> parser.
FORMATS: dict[str, Callable[[bytes, str], Parsed]] = {
    ".et": parse_delimited,
    ".json": _parse_json,
}


@dataclass(frozen=True)
class RankTrace:
    """One rank's trace: its metadata, nodes in file order, and what was tolerated."""

    path: Path
    rank: int
    metadata: pb.GlobalMetadata
    nodes: tuple[pb.Node, ...]
    warnings: tuple[str, ...]

    @cached_property
    def index(self) -> DepIndex:
        """Ids, types and dependencies resolved to positions (built once, at read time)."""
        return build_index(self.nodes)


def read_rank(path: str | Path, rank: int | None = None) -> RankTrace:
    """Read a whole rank file. `rank` defaults to the number in `<prefix>.<rank>.et`, else 0."""
    path = Path(path)
    source = str(path)
    data, inner_name = _read_bytes(path)
    with _gc_paused():
        metadata, node_list, warnings = _parser_for(inner_name, data)(data, source)
        index = build_index(node_list)
    _check_types(index, source)
    warnings.extend(_dependency_warnings(index))
    if rank is None:
        match = RANK_IN_NAME.search(path.name)
        rank = int(match.group(1)) if match else 0
    trace = RankTrace(path, rank, metadata, tuple(node_list), tuple(warnings))
    trace.__dict__["index"] = index  # prime the cached_property: built above anyway
    return trace


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while millions of acyclic message wrappers are created: collections
    triggered by the allocation count would traverse them all repeatedly for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def iter_records(path: str | Path) -> Iterator[pb.Node]:
    """The nodes of one rank file, one at a time (the GlobalMetadata is checked, not yielded)."""
    path = Path(path)
    source = str(path)
    data, inner_name = _read_bytes(path)
    parser = _parser_for(inner_name, data)
    nodes: Iterator[pb.Node]
    if parser is parse_delimited:
        nodes = iter_delimited(data, source)
    else:
        nodes = iter(parser(data, source)[1])
    for node in nodes:
        if node.type not in NODE_TYPE_NAMES:
            raise TraceError(f"{source}: node {node.id}: unknown NodeType {node.type}")
        yield node


def _read_bytes(path: Path) -> tuple[bytes, str]:
    """File contents, gunzipped when gzip; and the name that tells the inner format."""
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, expected a trace file or a trace prefix")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    name = path.name
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(f"{path}: corrupt gzip data: {one_line(exc)}") from None
        name = name.removesuffix(".gz")
    elif name.endswith(".gz"):
        raise TraceError(f"{path}: named .gz but is not gzip data")
    return data, name


def _parser_for(name: str, data: bytes) -> Callable[[bytes, str], Parsed]:
    for suffix, parser in FORMATS.items():
        if name.endswith(suffix):
            return parser
    # Unknown name: JSON starts with '{'; anything else is taken as the binary form.
    return _parse_json if data.lstrip()[:1] == b"{" else parse_delimited


def _check_types(index: DepIndex, source: str) -> None:
    known = np.array(sorted(NODE_TYPE_NAMES), dtype=np.int64)
    unknown = ~np.isin(index.node_types, known)
    if np.any(unknown):
        position = int(np.argmax(unknown))
        raise TraceError(
            f"{source}: node {int(index.node_ids[position])} (node #{position + 1} in the file): "
            f"unknown NodeType {int(index.node_types[position])}"
        )


def _dependency_warnings(index: DepIndex) -> list[str]:
    warnings = []
    duplicates = index.duplicate_ids
    if len(duplicates):
        shown = ", ".join(str(int(i)) for i in duplicates[:_EXAMPLES])
        warnings.append(
            f"{len(duplicates)} node id(s) used by more than one node (e.g. {shown}); "
            "dependencies on them resolve to the first"
        )
    for kind, edges in (("data_deps", index.data), ("ctrl_deps", index.ctrl)):
        warnings.extend(_edge_warnings(kind, edges, index))
    return warnings


def _edge_warnings(kind: str, edges: DepEdges, index: DepIndex) -> list[str]:
    warnings: list[str] = []
    if edges.count == 0:
        return warnings
    dangling = np.flatnonzero(edges.dangling)
    if len(dangling):
        warnings.append(
            f"{len(dangling)} {kind} point to node ids not in the file "
            f"(e.g. {_examples(dangling, edges, index)})"
        )
    loops = np.flatnonzero(edges.self_loop)
    if len(loops):
        nodes = np.unique(edges.owner[loops])
        shown = ", ".join(str(int(index.node_ids[p])) for p in nodes[:_EXAMPLES])
        warnings.append(f"{len(nodes)} node(s) list themselves in {kind} (e.g. {shown})")
    return warnings


def _examples(entries: np.ndarray, edges: DepEdges, index: DepIndex) -> str:
    pairs = []
    for entry in entries[:_EXAMPLES]:
        owner = int(index.node_ids[edges.owner[entry]])
        pairs.append(f"node {owner} -> {int(edges.ids[entry])}")
    return ", ".join(pairs)
