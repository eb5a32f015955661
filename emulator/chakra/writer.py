"""Write Chakra traces in the `.et` form every Chakra tool reads (optionally gzip-compressed).

Bytes are exactly what chakra's own encodeMessage produces (varint32 length, then the message
serialised by protobuf), so writing back a trace we read reproduces the file byte for byte.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from pathlib import Path

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.delimited import encode_delimited
from emulator.errors import TraceError

# gzip member mtime fixed at 0 so the same trace always compresses to the same bytes.
_GZIP_MTIME = 0


def encode_rank(metadata: pb.GlobalMetadata, nodes: Iterable[pb.Node]) -> bytes:
    """The `.et` bytes of one rank: the GlobalMetadata record, then one record per node.

    `nodes` may be a generator: each node is serialised as it comes, never held all at once.
    """
    return encode_delimited(chain((metadata,), nodes))


def write_rank(path: str | Path, metadata: pb.GlobalMetadata, nodes: Iterable[pb.Node]) -> Path:
    """Write one rank file; gzip-compressed when the name ends in `.gz`. Returns the path."""
    path = Path(path)
    data = encode_rank(metadata, nodes)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=_GZIP_MTIME)
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise TraceError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return path


def write_trace_set(
    prefix: str | Path,
    ranks: Sequence[tuple[pb.GlobalMetadata, Sequence[pb.Node]]],
    comm_groups: Mapping[str, Sequence[int]] | None = None,
    *,
    gzip: bool = False,
) -> list[Path]:
    """Write `<prefix>.<rank>.et` (or `.et.gz`) for every rank, and `<prefix>.comm_groups.json`
    when comm_groups is given. Returns the paths written, rank files first."""
    prefix = Path(prefix)
    suffix = ".et.gz" if gzip else ".et"
    paths = [
        write_rank(prefix.with_name(f"{prefix.name}.{rank}{suffix}"), metadata, nodes)
        for rank, (metadata, nodes) in enumerate(ranks)
    ]
    if comm_groups is not None:
        groups_path = prefix.with_name(f"{prefix.name}.comm_groups.json")
        document = {str(name): [int(r) for r in members] for name, members in comm_groups.items()}
        try:
            groups_path.write_text(json.dumps(document, indent=1) + "\n")
        except OSError as exc:
            raise TraceError(f"{groups_path}: cannot write: {exc.strerror or exc}") from None
        paths.append(groups_path)
    return paths
