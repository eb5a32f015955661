"""The generic YAML -> dataclass loader: keys, types, ranges and errors that name file/key/line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from emulator.config import param
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.scenario.loader import compose_file, load_dataclass


@dataclass(frozen=True)
class Inner:
    rate_gbps: float = param(100.0, doc="rate", unit="Gb/s", min=0.0, min_exclusive=True)
    mode: Literal["a", "b"] = param("a", doc="mode")


@dataclass(frozen=True)
class KindA:
    size_bytes: int = param(1, doc="size", min=1)


@dataclass(frozen=True)
class KindB:
    name: str = param("x", doc="name")


@dataclass(frozen=True, kw_only=True)
class Top:
    required: int = param(doc="must be given", min=0, max=10)
    flag: bool = param(False, doc="flag")
    tdf: float | Literal["auto"] = param("auto", doc="tdf", min=1.0)
    ports: tuple[int, ...] = param((), doc="ports", min=1, max=65535)
    algorithms: dict[str, str] = param(default_factory=dict, doc="algorithms")
    maybe: str | None = param(None, doc="optional")
    inner: Inner = field(default_factory=Inner)
    choice: Any = param(None, doc="by kind", kinds={"a": KindA, "b": KindB})

    def __post_init__(self) -> None:
        if self.flag and self.required == 0:
            raise ValueError("flag: needs required > 0")


def load(tmp_path: Path, text: str) -> Top:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result: Top = load_dataclass(Top, compose_file(path), path)
    return result


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ScenarioError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "s.yaml"))
    return message


def test_full_document_maps_onto_dataclasses(tmp_path: Path) -> None:
    top = load(
        tmp_path,
        "required: 3\nflag: true\ntdf: 10\nports: [1, 2]\nalgorithms: {ALL_REDUCE: ring}\n"
        "maybe: hi\ninner: {rate_gbps: 400, mode: b}\nchoice: {kind: b, name: y}\n",
    )
    assert top == Top(
        required=3,
        flag=True,
        tdf=10.0,
        ports=(1, 2),
        algorithms={"ALL_REDUCE": "ring"},
        maybe="hi",
        inner=Inner(400.0, "b"),
        choice=KindB("y"),
    )
    assert isinstance(top.tdf, float)


def test_defaults_fill_missing_keys(tmp_path: Path) -> None:
    top = load(tmp_path, "required: 0\n")
    assert top.tdf == "auto" and top.inner == Inner() and top.choice is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("required: 1\nbogus: 2\n", ":2: bogus: unknown key (allowed: "),
        ("required: 1\ninner:\n  rate_gbs: 4\n", ":3: inner.rate_gbs: unknown key"),
        (
            "required: 1\ninner:\n  rate_gbps: 0\n",
            ":3: inner.rate_gbps: 0 Gb/s must be greater than 0",
        ),
        ("required: 11\n", ":1: required: 11 must be at most 10"),
        ("required: 1.5\n", ":1: required: expected an integer, got float 1.5"),
        ("required: true\n", ":1: required: expected an integer, got bool True"),
        ("flag: true\nrequired: 0\n", ":1: flag: needs required > 0"),
        ("flag: 1\nrequired: 1\n", ":1: flag: expected true or false, got int 1"),
        ("required: 1\ntdf: fast\n", ":2: tdf: expected float or 'auto', got str 'fast'"),
        ("required: 1\ntdf: 0.5\n", ":2: tdf: 0.5 must be at least 1"),
        ("required: 1\ntdf: .nan\n", ":2: tdf: expected a finite number"),
        ("required: 1\nports: [1, 70000]\n", ":2: ports[1]: 70000 must be at most 65535"),
        ("required: 1\nports: 5\n", ":2: ports: expected a list, got int 5"),
        ("required: 1\ninner: [1]\n", ":2: inner: expected a mapping, got a list"),
        ("required: 1\ninner:\n  mode: c\n", ":3: inner.mode: expected one of 'a', 'b', got 'c'"),
        ("required: 1\nchoice: {name: y}\n", ":2: choice: missing 'kind' (one of: a, b)"),
        ("required: 1\nchoice: {kind: z}\n", ":2: choice.kind: unknown kind 'z' (one of: a, b)"),
        ("required: 1\nchoice:\n  kind: a\n  size_bytes: 0\n", ":4: choice.size_bytes: 0 must be"),
        ("required: 1\nchoice: {kind: a, name: y}\n", ":2: choice.name: unknown key"),
        ("flag: false\n", ":1: required: missing (this key is required)"),
        ("required: 1\nrequired: 2\n", ":2: required: duplicate key"),
        ("required: 1\nmaybe: 3\n", ":2: maybe: expected str or null, got int 3"),
        ("- 1\n- 2\n", ":1: expected a mapping, got a list"),
        ("required: [1\n", ": invalid YAML"),
        ("required: 1\n\tflag: true\n", ":2: invalid YAML"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in error(tmp_path, text)


def test_empty_and_unreadable_files(tmp_path: Path) -> None:
    assert "empty file" in error(tmp_path, "")
    with pytest.raises(ScenarioError, match="is a directory"):
        compose_file(tmp_path)
    with pytest.raises(ScenarioError, match="no such file"):
        compose_file(tmp_path / "missing.yaml")
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ScenarioError, match="not a UTF-8"):
        compose_file(binary)


@pytest.mark.parametrize(
    ("stragglers", "says"),
    [
        ("{x: 2.0}", "compute.stragglers: 'x' is not a rank number"),
        ("{3: 0}", "compute.stragglers: rank 3: factor 0.0 must be positive"),
        ("{3: -1.5}", "compute.stragglers: rank 3: factor -1.5 must be positive"),
        ("{3: .inf}", "compute.stragglers.3: expected a finite number, got inf"),
        ("[3]", "compute.stragglers: expected a mapping"),
    ],
)
def test_straggler_impairment_is_checked(tmp_path: Path, stragglers: str, says: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        f"workload: {{generate: {{kind: allreduce}}}}\ncompute:\n  stragglers: {stragglers}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert says in str(info.value) and str(path) in str(info.value)


def test_straggler_impairment_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("workload: {generate: {kind: allreduce}}\ncompute: {stragglers: {3: 2.5}}\n")
    compute = load_scenario(path).compute
    assert compute.stragglers == {"3": 2.5}
    assert compute.compute_factor(3) == 2.5 and compute.compute_factor(0) == 1.0
