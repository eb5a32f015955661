"""collectors.columns: records kept as typed columns give the table to_table builds from the
same records, and give the records back."""

from __future__ import annotations

import dataclasses
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
@given(st.lists(mixed, max_size=40), st.lists(st.booleans(), max_size=40), st.integers(1, 9))
def test_records_given_as_values_are_the_records_appended(
    records: list[Mixed], as_values: list[bool], flush_every: int
) -> None:
    """append_values, mixed with append and batched (flushed every few records, and before
    anything reads), keeps what append keeps: strings coded in first-seen order, nulls, bools."""
    appended = RecordColumns(Mixed)
    for r in records:
        appended.append(r)
    given = RecordColumns(Mixed)
    with pytest.MonkeyPatch.context() as m:
        m.setattr("collectors.columns.ROWS_PER_FLUSH", flush_every)
        for i, r in enumerate(records):
            if i < len(as_values) and as_values[i]:
                given.append_values(dataclasses.astuple(r))
            else:
                given.append(r)
            assert len(given) == i + 1
    assert given.table().equals(appended.table())
    assert given.table().equals(to_table(records, Mixed))
    assert given.rows() == records


def test_values_that_do_not_fit_the_record_are_refused() -> None:
    with pytest.raises(ValueError, match="Mixed: 3 values for 8 fields"):
        RecordColumns(Mixed).append_values((0.0, "a", 1))


def test_attribution_and_mark_rows_given_as_values_are_their_records() -> None:
    """AttributionTable.add gives the simulator's rows as values in field order: the order the
    records' fields have."""
    from collectors.attribution import AttributionTable
    from emulator.events import PortAttribution

    table = AttributionTable()
    shares = table.add(
        PortAttribution(
            0.002,
            0.001,
            "l0",
            "l0-s0",
            ((3, 4096, 8192, 1, 2, 1e-6), (5, 0, 10, 0, 0, 3e-6)),
            (12, 13),
            0.5e-3,
        ),
        type_of=lambda i: f"T{i}",
        instance_of=lambda f: f - 10,
        job_of=lambda i: f"j{i}",
    )
    assert table.rows == [
        AttributionRow(
            0.002,
            0.001,
            "l0",
            "l0-s0",
            3,
            "T3",
            4096,
            8192,
            1,
            2,
            queue_byte_s=1e-6,
            pause_s=0.5e-3 * 1e-6 / 4e-6,
            job="j3",
        ),
        AttributionRow(
            0.002,
            0.001,
            "l0",
            "l0-s0",
            5,
            "T5",
            0,
            10,
            0,
            0,
            queue_byte_s=3e-6,
            pause_s=0.5e-3 * 3e-6 / 4e-6,
            job="j5",
        ),
    ]
    assert table.marks == [
        MarkRow(0.002, "l0", "l0-s0", 12, 2, "T2", "j2"),
        MarkRow(0.002, "l0", "l0-s0", 13, 3, "T3", "j3"),
    ]
    assert [s.tx_bytes for s in shares] == [8192, 10]
