"""Records and samples as Arrow tables with fixed schemas, and their parquet files.

Schemas come from the record dataclasses, so an empty table (a run interrupted before its first
flow finished) still has every column. File names: flows, collectives, nic, ports (.parquet).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.attribution import AttributionRow, MarkRow
from collectors.columns import RecordColumns, schema_of
from collectors.columns import rows as _rows
from collectors.queue_pairs import QpRow
from collectors.records import CollectiveRecord, FlowRecord
from collectors.samples import CpuRow, NicColumns, NicRow, PortColumns, PortRow
from emulator.errors import InputError

# A run builds and writes its tables once, at its end: the system allocator hands the buffers
# back as they are freed, where pyarrow's default (mimalloc) keeps them for reuse that never
# comes, and a large run's peak memory is its results stage (a 64-host MoE step: 449 -> 413 MB
# peak; docs/simulation.md). ARROW_DEFAULT_MEMORY_POOL, when set, still chooses.
if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
    pa.set_memory_pool(pa.system_memory_pool())

# Table name -> record class; the parquet file is <name>.parquet.
TABLES: dict[str, type] = {
    "flows": FlowRecord,
    "collectives": CollectiveRecord,
    "nic": NicRow,
    "ports": PortRow,
    "cpu": CpuRow,
    "queue_pairs": QpRow,
    "attribution": AttributionRow,
    "marks": MarkRow,
}
# Tables a results folder may lack (read as empty): added after the first folders were written.
OPTIONAL_TABLES = frozenset({"cpu", "queue_pairs", "attribution", "marks"})
ATTRIBUTION_TABLES = ("attribution", "marks")  # written only by a backend that tags packets


def to_table(rows: Sequence[Any], cls: type) -> pa.Table:
    schema = schema_of(cls)
    columns = {name: [getattr(r, name) for r in rows] for name in schema.names}
    return pa.Table.from_pydict(columns, schema=schema)


def _table(rows: Sequence[Any] | RecordColumns[Any], cls: type) -> pa.Table:
    return rows.table() if isinstance(rows, RecordColumns) else to_table(rows, cls)


def nic_table(rows: Sequence[NicRow], columns: Sequence[NicColumns] = ()) -> pa.Table:
    """The NIC table: rows sampled one counter at a time, then those sampled as columns."""
    table = to_table(rows, NicRow)
    if not columns:
        return table
    schema = table.schema
    names: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # by nics tuple: ranks and directions
    parts = [table] if len(table) else []
    for c in columns:
        if id(c.nics) not in names:
            names[id(c.nics)] = (
                np.array([rank for rank, _ in c.nics], dtype=np.int64),
                np.array([d for _, d in c.nics], dtype=object),
            )
        ranks, directions = names[id(c.nics)]
        arrays = {
            "time_s": np.full(len(c.index), c.time_s),
            "rank": ranks[c.index],
            "direction": directions[c.index],
            "bytes": c.bytes,
            "delta_bytes": c.delta_bytes,
            "interval_s": c.interval_s,
            "utilization": c.utilization,
        }
        parts.append(
            pa.Table.from_arrays(
                [pa.array(arrays[f.name], type=f.type) for f in schema], schema=schema
            )
        )
    return pa.concat_tables(parts) if parts else table


def ports_table(rows: Sequence[PortRow], columns: Sequence[PortColumns] = ()) -> pa.Table:
    """The ports table: rows sampled one port at a time, then those sampled as columns (a run
    samples its ports one way; each PortColumns keeps its ports' order)."""
    table = to_table(rows, PortRow)
    if not columns:
        return table
    schema = table.schema
    names: dict[int, tuple[pa.Array, pa.Array]] = {}  # by ports tuple: its switch and port names
    parts = [table] if len(table) else []
    for c in columns:
        sample = c.sample
        if id(sample.ports) not in names:
            names[id(sample.ports)] = (
                pa.array([sw for sw, _ in sample.ports], type=pa.string()),
                pa.array([port for _, port in sample.ports], type=pa.string()),
            )
        switch, port = names[id(sample.ports)]
        n = len(sample.ports)
        none = pa.nulls(n)
        arrays = {
            "time_s": pa.array(np.full(n, sample.time_s)),
            "switch": switch,
            "port": port,
            "tx_bytes": sample.tx_bytes,
            "tx_packets": sample.tx_packets,
            "ecn_marks": sample.ecn_marks,
            "drops": sample.drops,
            "queue_bytes": sample.queue_bytes,
            "delta_bytes": c.delta_bytes,
            "interval_s": c.interval_s,
            "utilization": c.utilization,
            "pause_s": none if sample.pause_s is None else sample.pause_s,
            "pause_events": none if sample.pause_events is None else sample.pause_events,
        }
        parts.append(
            pa.Table.from_arrays(
                [pa.array(arrays[f.name], type=f.type) for f in schema], schema=schema
            )
        )
    return pa.concat_tables(parts)


@dataclass(frozen=True)
class RunTables:
    flows: pa.Table
    collectives: pa.Table
    nic: pa.Table
    ports: pa.Table
    cpu: pa.Table = field(default_factory=lambda: to_table([], CpuRow))
    queue_pairs: pa.Table = field(default_factory=lambda: to_table([], QpRow))
    attribution: pa.Table = field(default_factory=lambda: to_table([], AttributionRow))
    marks: pa.Table = field(default_factory=lambda: to_table([], MarkRow))
    # the backend tagged packets by collective (attribution and marks are measured, even empty)
    attribution_measured: bool = False

    @classmethod
    def from_rows(
        cls,
        flows: Sequence[FlowRecord] = (),
        collectives: Sequence[CollectiveRecord] = (),
        nic: Sequence[NicRow] = (),
        ports: Sequence[PortRow] = (),
        cpu: Sequence[CpuRow] = (),
        queue_pairs: Sequence[QpRow] = (),
        *,
        nic_columns: Sequence[NicColumns] = (),
        port_columns: Sequence[PortColumns] = (),
        attribution: Sequence[AttributionRow] | RecordColumns[AttributionRow] = (),
        marks: Sequence[MarkRow] | RecordColumns[MarkRow] = (),
        attribution_measured: bool = False,
    ) -> RunTables:
        return cls(
            flows=to_table(flows, FlowRecord),
            collectives=to_table(collectives, CollectiveRecord),
            nic=nic_table(nic, nic_columns),
            ports=ports_table(ports, port_columns),
            cpu=to_table(cpu, CpuRow),
            queue_pairs=to_table(queue_pairs, QpRow),
            attribution=_table(attribution, AttributionRow),
            marks=_table(marks, MarkRow),
            attribution_measured=attribution_measured,
        )

    def by_name(self) -> Mapping[str, pa.Table]:
        """The tables a results folder holds: attribution and marks only where measured (their
        presence is what says so when the folder is read back)."""
        skip = () if self.attribution_measured else ATTRIBUTION_TABLES
        return {name: getattr(self, name) for name in TABLES if name not in skip}


# Rows per parquet row group: the writer holds a whole row group's encoded pages before it
# writes them (one group per table by default: a 64-host MoE step's writes peaked 61 MB above
# the tables, 34 MB in groups of this size; readers see the same table)
ROW_GROUP_ROWS = 16_384


def write_parquet(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, row_group_size=ROW_GROUP_ROWS)


def read_tables(folder: Path) -> RunTables:
    """Read the four parquet files of a results folder; InputError names a missing or bad file."""
    tables: dict[str, pa.Table] = {}
    for name, cls in TABLES.items():
        path = folder / f"{name}.parquet"
        if name in OPTIONAL_TABLES and not path.exists():
            tables[name] = to_table([], cls)
            continue
        try:
            table = pq.read_table(path)
        except FileNotFoundError:
            raise InputError(f"{path}: missing; is {folder} a results folder?") from None
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{path}: cannot read as parquet: {exc}") from exc
        missing = set(schema_of(cls).names) - set(table.column_names)
        defaults = _defaults(cls)
        if missing - set(defaults):
            names = ", ".join(sorted(missing - set(defaults)))
            raise InputError(f"{path}: missing columns {names}")
        schema = schema_of(cls)
        for column_name in sorted(missing):  # added later, with a default: older folders lack it
            field_ = schema.field(column_name)
            value = defaults[column_name]
            table = table.append_column(
                field_, pa.array([value] * table.num_rows, type=field_.type)
            )
        tables[name] = table
    measured = (folder / "attribution.parquet").exists()
    return RunTables(**tables, attribution_measured=measured)


def _defaults(cls: type) -> dict[str, Any]:
    return {
        f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING
    }


def column(table: pa.Table, name: str) -> list[Any]:
    return list(table.column(name).to_pylist())


rows = _rows  # its callers import it from here (it lives in collectors.columns, below attribution)
