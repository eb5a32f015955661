"""Record dataclasses as Arrow schemas, and a compact store of many records as typed columns.

A table of many small records (attribution windows, marks) held as dataclass instances costs
about 250 bytes a row in Python (the object and its boxed numbers); held as columns it costs
8 bytes a number and 4 a string (a code into the column's distinct strings), and becomes the
same Arrow table to_table would build from the instances.
"""

from __future__ import annotations

import dataclasses
import operator
from array import array
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa

ARROW_TYPES: dict[str, Any] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bool": pa.bool_(),
}
_ARRAY_CODES = {"int": "q", "float": "d", "bool": "b", "str": "i"}  # str: codes into names

R = TypeVar("R")
ROWS_PER_BATCH = 16_384  # rows `rows` converts to Python objects at a time
ROWS_PER_FLUSH = 4096  # records kept aside before they are written to the columns


def field_types(cls: type) -> list[tuple[str, str, bool]]:
    """(name, base type int/float/str/bool, nullable) of each field of a record dataclass."""
    out = []
    for f in dataclasses.fields(cls):
        text = str(f.type).replace(" ", "")
        nullable = text.endswith("|None")
        out.append((f.name, text.removesuffix("|None"), nullable))
    return out


def schema_of(cls: type) -> pa.Schema:
    """Arrow schema of a record dataclass (field annotations int/float/str/bool, `| None`)."""
    return pa.schema(
        pa.field(name, ARROW_TYPES[base], nullable=nullable)
        for name, base, nullable in field_types(cls)
    )


class RecordColumns(Generic[R]):
    """Records of dataclass `cls`, appended one at a time, kept as one typed array per field
    (a null: a zero in the field's validity bytes); `table()` is to_table's table of
    the same records, `rows()` gives them back as instances."""

    def __init__(self, cls: type[R]) -> None:
        self.cls = cls
        self.schema = schema_of(cls)
        self._fields = field_types(cls)
        self._data = [array(_ARRAY_CODES[base]) for _, base, _ in self._fields]
        self._valid = [bytearray() if nullable else None for _, _, nullable in self._fields]
        # per str field: its distinct strings in first-seen order, and their codes
        self._names: list[list[str] | None] = [
            [] if base == "str" else None for _, base, _ in self._fields
        ]
        self._codes: list[dict[str, int] | None] = [
            {} if base == "str" else None for _, base, _ in self._fields
        ]
        self._len = 0
        self._pending: list[tuple[Any, ...]] = []  # append_values' records, not yet in columns
        getter = operator.attrgetter(*(name for name, _, _ in self._fields))
        # attrgetter of one name gives the value, not a tuple of it
        self._values_of: Callable[[Any], tuple[Any, ...]] = (
            getter if len(self._fields) > 1 else lambda record: (getter(record),)
        )
        self._plan: list[tuple[str, array[Any], bytearray | None, dict[str, int] | None, Any]] = [
            (name, self._data[i], self._valid[i], self._codes[i], self._names[i])
            for i, (name, _, _) in enumerate(self._fields)
        ]

    def __len__(self) -> int:
        return self._len + len(self._pending)

    def append(self, record: R) -> None:
        # its fields' values, written with the other records kept aside (one writer of both)
        self._pending.append(self._values_of(record))
        if len(self._pending) >= ROWS_PER_FLUSH:
            self._flush()

    def extend(self, records: Iterable[R]) -> None:
        for record in records:
            self.append(record)

    def append_values(self, values: tuple[Any, ...]) -> None:
        """One record as its fields' values in field order (what dataclasses.astuple gives),
        with no instance built: kept aside, and written to the columns a batch at a time (a
        field at a time: the per-field work of `append` paid once per batch)."""
        if len(values) != len(self._plan):
            raise ValueError(
                f"{self.cls.__name__}: {len(values)} values for {len(self._plan)} fields"
            )
        self._pending.append(values)
        if len(self._pending) >= ROWS_PER_FLUSH:
            self._flush()

    def _flush(self) -> None:
        """The records append and append_values kept aside, into the columns (before anything
        reads them)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        for (_, data, valid, codes, names), values in zip(
            self._plan, zip(*pending, strict=True), strict=True
        ):
            if valid is not None:
                valid.extend(v is not None for v in values)
            if codes is not None:
                coded = []
                for value in values:
                    if value is None:  # a null: 0 in the data, as append writes it
                        coded.append(0)
                        continue
                    code = codes.get(value)
                    if code is None:
                        code = codes[value] = len(codes)
                        names.append(value)
                    coded.append(code)
                data.extend(coded)
            elif valid is not None and None in values:
                data.extend([0 if v is None else v for v in values])
            else:
                data.extend(values)
        self._len += len(pending)

    def _column(self, i: int, start: int = 0, stop: int | None = None) -> list[Any]:
        self._flush()
        stop = self._len if stop is None else stop
        values: list[Any] = self._data[i][start:stop].tolist()
        names = self._names[i]
        if names is not None:
            values = [names[c] for c in values] if names else [None] * len(values)
        elif self._fields[i][1] == "bool":
            values = [bool(v) for v in values]
        valid = self._valid[i]
        if valid is not None:
            values = [v if ok else None for v, ok in zip(values, valid[start:stop], strict=True)]
        return values

    def rows(self, start: int = 0, stop: int | None = None) -> list[R]:
        """Records start..stop as instances of cls."""
        columns = [self._column(i, start, stop) for i in range(len(self._fields))]
        return [self.cls(*values) for values in zip(*columns, strict=True)]

    def table(self) -> pa.Table:
        self._flush()
        arrays = []
        for i, (field, (_, base, _)) in enumerate(zip(self.schema, self._fields, strict=True)):
            data = self._data[i]
            valid = self._valid[i]
            mask = None if valid is None else np.frombuffer(bytes(valid), dtype=np.bool_) == 0
            names = self._names[i]
            if names is not None:
                codes = np.frombuffer(data, dtype=np.int32) if len(data) else np.zeros(0, np.int32)
                dictionary = pa.array(names, type=pa.string())
                column = pa.DictionaryArray.from_arrays(pa.array(codes, mask=mask), dictionary)
                arrays.append(column.cast(pa.string()))
                continue
            dtype = {"int": np.int64, "float": np.float64, "bool": np.int8}[base]
            values = np.frombuffer(data, dtype=dtype) if len(data) else np.zeros(0, dtype)
            if base == "bool":
                values = values.astype(np.bool_)
            arrays.append(pa.array(values, type=field.type, mask=mask))
        return pa.Table.from_arrays(arrays, schema=self.schema)


def rows(table: pa.Table, names: Iterable[str]) -> Iterator[tuple[Any, ...]]:
    """Rows of the named columns as tuples, in order, converted a batch at a time (a large
    run's attribution or ports table as Python objects all at once is tens of MB)."""
    selected = table.select(list(names))
    for start in range(0, selected.num_rows, ROWS_PER_BATCH):
        batch = selected.slice(start, ROWS_PER_BATCH)
        yield from zip(*(c.to_pylist() for c in batch.columns), strict=True)
