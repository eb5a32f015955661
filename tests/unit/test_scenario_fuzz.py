"""Property tests: a mutated scenario file loads or is refused with ScenarioError, never anything else.

Mutations start from the shipped scenarios: at the YAML level (a value replaced by one of another
type or out of range, a key deleted, an unknown key added, a section replaced by a scalar or a
list) and at the text level (bytes flipped, the file cut short, tabs and stray characters). Inputs
that once escaped as another exception are kept in fuzz_corpus/scenarios/ and replayed every run.
Bounded: a few hundred examples per property.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.errors import ScenarioError
from emulator.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml"))
CORPUS = Path(__file__).resolve().parent / "fuzz_corpus" / "scenarios"
FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["auto", "", "1e309", "-0", "0x10", "nan", "~", "[", "{a: 1}"]),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path in a YAML document (into dicts and lists)."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return doc


def _delete(doc: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return doc
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    del parent[path[-1]]
    return doc


@st.composite
def mutated_documents(draw: st.DrawFn) -> str:
    source = draw(st.sampled_from(SHIPPED))
    doc = yaml.safe_load(source.read_text())
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "delete", "unknown"]))
        if kind == "replace":
            doc = _set(doc, path, draw(ODD_VALUES))
        elif kind == "delete":
            doc = _delete(doc, path)
        else:
            target = doc
            for k in path:
                target = target[k]
            if isinstance(target, dict):
                target[draw(st.text(min_size=1, max_size=8))] = draw(ODD_VALUES)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@st.composite
def mutated_texts(draw: st.DrawFn) -> bytes:
    buf = bytearray(draw(st.sampled_from(SHIPPED)).read_bytes())
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        i = draw(st.integers(0, len(buf) - 1)) if buf else 0
        if kind == "flip" and buf:
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del buf[i:]
        else:
            buf[i:i] = draw(
                st.sampled_from([b"\t", b":", b"- ", b"\x00", b"\xff", b"&a *a", b"!!"])
            )
    return bytes(buf)


def _loads_or_refuses(path: Path) -> None:
    try:
        load_scenario(path)
    except ScenarioError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip(), message
        assert str(path) in message or path.name in message, message


@FUZZ
@given(mutated_documents())
def test_mutated_documents_load_or_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "mutated.yaml"
    path.write_text(text)
    _loads_or_refuses(path)


@FUZZ
@given(mutated_texts())
def test_mutated_bytes_load_or_are_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "mutated.yaml"
    path.write_bytes(data)
    _loads_or_refuses(path)


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.yaml"))


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_corpus_inputs_are_refused_with_a_scenario_error(path: Path) -> None:
    with pytest.raises(ScenarioError):
        load_scenario(path)


def test_the_corpus_is_there() -> None:
    assert len(_corpus()) >= 5
