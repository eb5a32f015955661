"""collectors.columns: records kept as typed columns give the table to_table builds from the
same records, and give the records back."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.attribution import AttributionRow, MarkRow
from collectors.columns import RecordColumns
from collectors.tables import to_table


@dataclass(frozen=True, slots=True)
class Mixed:
    when_s: float
    name: str
    count: int
    flag: bool
    maybe_count: int | None = None
    maybe_name: str | None = None
    maybe_flag: bool | None = None
    maybe_s: float | None = None


ints = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=False)
names = st.sampled_from(["", "l0", "l0-s1", "ALL_TO_ALL", "é/ü"])
mixed = st.builds(
    Mixed,
    floats,
    names,
    ints,
    st.booleans(),
    st.none() | ints,
    st.none() | names,
    st.none() | st.booleans(),
    st.none() | floats,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(mixed, max_size=40))
def test_columns_give_to_tables_table_and_the_records_back(records: list[Mixed]) -> None:
    columns = RecordColumns(Mixed)
    for r in records:
        columns.append(r)
    assert len(columns) == len(records)
    expected = to_table(records, Mixed)
    got = columns.table()
    assert got.schema == expected.schema
    assert got.equals(expected)
    assert columns.rows() == records
    assert columns.rows(1, 3) == records[1:3]


def test_attribution_and_mark_rows_round_trip() -> None:
    rows = [
        AttributionRow(
            0.001,
            0.001,
            "l0",
            "l0-s0",
            3,
            "ALL_TO_ALL",
            4096,
            8192,
            1,
            0,
            queue_byte_s=1e-6,
            pause_s=None,
            job="",
        ),
        AttributionRow(
            0.002,
            0.001,
            "s1",
            "s1-l0",
            -1,
            "ALL_REDUCE",
            10,
            20,
            0,
            2,
            packets=5,
            queue_byte_s=0.0,
            pause_s=0.5,
            pause_events=1,
            attribution_class=7,
            source="emulated",
            job="a",
        ),
    ]
    marks = [
        MarkRow(0.001, "l0", "l0-s0", 12, 3, "ALL_TO_ALL"),
        MarkRow(0.002, "l0", "x", 1, -1, "UNKNOWN", "b"),
    ]
    for records, cls in ((rows, AttributionRow), (marks, MarkRow)):
        columns: RecordColumns = RecordColumns(cls)
        for r in records:
            columns.append(r)
        assert columns.table().equals(to_table(records, cls))
        assert columns.rows() == records
    empty: RecordColumns = RecordColumns(AttributionRow)
    assert empty.table().equals(to_table([], AttributionRow)) and empty.table().num_rows == 0
    assert isinstance(empty.table(), pa.Table)


@settings(max_examples=200, deadline=None)
@given(st.lists(mixed, max_size=40), st.lists(st.integers(0, 7), max_size=12), st.booleans())
def test_records_given_as_columns_are_the_records_appended(
    records: list[Mixed], cuts: list[int], leave_out_defaults: bool
) -> None:
    """extend_columns, chunk by chunk between appends, keeps what append keeps (strings coded in
    first-seen order, nulls, bools), and a field left out takes its default."""
    if leave_out_defaults:  # records whose defaulted fields hold their defaults
        records = [Mixed(r.when_s, r.name, r.count, r.flag) for r in records]
    appended = RecordColumns(Mixed)
    for r in records:
        appended.append(r)
    given_as_columns = RecordColumns(Mixed)
    i = 0
    for k, cut in enumerate([*cuts, len(records)]):
        chunk = records[i : i + cut]
        i += len(chunk)
        if k % 2:  # alternate: one at a time, then as columns
            for r in chunk:
                given_as_columns.append(r)
            continue
        names = ["when_s", "name", "count", "flag"]
        if not leave_out_defaults:
            names += ["maybe_count", "maybe_name", "maybe_flag", "maybe_s"]
        given_as_columns.extend_columns(
            len(chunk), {n: [getattr(r, n) for r in chunk] for n in names}
        )
    assert len(given_as_columns) == len(records)
    assert given_as_columns.table().equals(appended.table())
    assert given_as_columns.table().equals(to_table(records, Mixed))
    assert given_as_columns.rows() == records


def test_columns_that_do_not_fit_the_record_are_refused() -> None:
    columns = RecordColumns(Mixed)
    with pytest.raises(TypeError, match="no field 'nope'"):
        columns.extend_columns(1, {"nope": [1]})
    with pytest.raises(ValueError, match=r"Mixed\.name: 2 values, not 1"):
        columns.extend_columns(1, {"when_s": [0.0], "name": ["a", "b"]})
    with pytest.raises(TypeError, match=r"Mixed\.count has no default"):
        columns.extend_columns(1, {"when_s": [0.0], "name": ["a"], "flag": [True]})
