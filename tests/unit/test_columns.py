"""collectors.columns: records kept as typed columns give the table to_table builds from the
same records, and give the records back."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
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
