"""Process groups of a trace set: which ranks take part in a collective whose pg_name is X.

Sources, first found wins: the file named explicitly; files found next to the traces
(`<prefix>.comm_groups.json` as write_trace_set writes it, `comm_group.json`,
`../inputs/comm_group.json` as in astra-sim-artifacts, `workload.json` as STG writes it), all of
the form `{"<pg id>": [ranks...]}` (ASTRA-sim's --comm-group-configuration format); else a
METADATA node named `## process_group:init ##` whose inputs hold PyTorch's pg_config_info JSON list
(torch.profiler ExecutionTraceObserver._record_pg_config).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.attrs import normalise_pg_id
from emulator.chakra.names import one_line
from emulator.errors import TraceError

CommGroups = dict[str, tuple[int, ...]]

PG_INIT_NODE_NAME = "## process_group:init ##"


def candidate_paths(prefix: Path) -> list[Path]:
    """Where a comm-group file for the set `prefix` may sit, in the order they are tried."""
    folder = prefix.parent
    return [
        folder / f"{prefix.name}.comm_groups.json",
        folder / "comm_group.json",
        folder.parent / "inputs" / "comm_group.json",
        folder / "workload.json",
    ]


def parse_comm_groups(document: Any, source: str) -> CommGroups:
    """`{"<pg id>": [ranks]}` -> {normalised pg id: ranks}. Raises TraceError naming the key."""
    if not isinstance(document, dict):
        raise TraceError(f'{source}: expected a JSON object {{"<pg id>": [ranks...]}}')
    groups: CommGroups = {}
    for key, members in document.items():
        if not isinstance(members, list) or not members or not all(_is_rank(r) for r in members):
            raise TraceError(
                f"{source}: group {key!r}: expected a non-empty list of rank numbers (ints >= 0)"
            )
        groups[normalise_pg_id(str(key))] = tuple(members)
    return groups


def read_comm_groups(path: Path) -> CommGroups:
    """Read and check a comm-group file; raises TraceError naming the file."""
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, expected a comm-group JSON file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read: {one_line(exc)}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    return parse_comm_groups(document, str(path))


def find_comm_groups(prefix: Path, explicit: Path | None) -> tuple[CommGroups, Path | None]:
    """The explicit file (errors are fatal) or the first candidate that is a valid group file."""
    if explicit is not None:
        return read_comm_groups(explicit), explicit
    for candidate in candidate_paths(prefix):
        if not candidate.is_file():
            continue
        try:
            return read_comm_groups(candidate), candidate
        except TraceError:
            continue  # e.g. a feeder-JSON trace called workload.json: not ours to judge
    return {}, None


def groups_from_pg_init(nodes: Iterable[pb.Node]) -> CommGroups:
    """Process groups recorded by PyTorch in a `## process_group:init ##` METADATA node."""
    for node in nodes:
        if node.type == pb.METADATA_NODE and node.name == PG_INIT_NODE_NAME:
            entries = _first_json_list(node.inputs.values)
            return {
                normalise_pg_id(str(entry["pg_name"])): tuple(entry["ranks"])
                for entry in entries
                if _is_pg_entry(entry)
            }
    return {}


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_pg_entry(entry: Any) -> bool:
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    return (
        isinstance(ranks, list)
        and bool(ranks)
        and "pg_name" in entry
        and all(_is_rank(r) for r in ranks)
    )


def _first_json_list(text: str) -> Sequence[Any]:
    """The first `[{...}, ...]` JSON list inside `text` (it may be wrapped in a Python repr)."""
    decoder = json.JSONDecoder()
    start = text.find("[")
    while start != -1:
        try:
            value, _end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
        start = text.find("[", start + 1)
    return []


def check_members(groups: CommGroups, world_size: int, source: str) -> list[str]:
    """Problems with group members for a set of `world_size` ranks (as messages)."""
    problems = []
    for name, members in groups.items():
        outside = [r for r in members if r >= world_size]
        if outside:
            problems.append(
                f"{source}: group {name!r} names rank(s) {outside} but the set has "
                f"{world_size} rank(s)"
            )
    return problems
