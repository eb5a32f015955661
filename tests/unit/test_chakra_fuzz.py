"""Property tests: mutated real traces either load or raise TraceError, never anything else.

Mutations (bit flips, truncation, inserted and deleted bytes) are applied to real traces from
../shared/traces and to a synthetic trace made by the writer (so the test runs without the folder).
Inputs that once broke the reader are kept in fuzz_corpus/chakra/ and replayed every run.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.chakra import encode_rank, iter_records, load_trace_set, pb
from emulator.chakra.summary import summarize
from emulator.errors import TraceError

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"
CORPUS = Path(__file__).resolve().parent / "fuzz_corpus" / "chakra"
REAL_SEEDS = [
    "astra-sim-tutorials/micro2024/astra-sim-demo/demo2/workload/MLP_ModelParallel.0.et",
    "astra-sim/examples/system/custom_collectives/custom_ring_allreduce_8npus_1MB/"
    "custom_allreduce.0.et",
    "chakra-generated/generator_npus8/one_metadata_node_all_types.0.et",
    "stg-generated/dp2_tp2_pp2_gpt_4layers/workload.0.et",
]
JSON_SEEDS = [
    "chakra-generated/jsonizer/MLP_ModelParallel.0.json",
    "mlcommons-chakra/jsonData/small_chakra.0.json",
]
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _synthetic() -> bytes:
    nodes = []
    for i in range(12):
        node = pb.Node(id=100 + i, name=f"n{i}", type=pb.COMM_COLL_NODE if i % 3 else pb.COMP_NODE)
        node.data_deps.extend([100 + i - 1] if i else [])
        node.ctrl_deps.append(100 + i + 1)
        node.attr.add(name="comm_type", int64_val=i % 10)
        node.attr.add(name="comm_size", uint64_val=1 << i)
        node.attr.add(name="pg_name", string_val="0.0")
        nodes.append(node)
    return encode_rank(pb.GlobalMetadata(version="0.0.4"), nodes)


def _seeds(names: list[str]) -> list[bytes]:
    return [(TRACES / name).read_bytes() for name in names if (TRACES / name).is_file()]


ET_SEEDS = [_synthetic(), *_seeds(REAL_SEEDS)]
JSON_TEXT_SEEDS = _seeds(JSON_SEEDS) or [b'{"workload_graph": [{"Id": 1, "NodeType": 4}]}']

MUTATION = st.tuples(
    st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite"]),
    st.integers(min_value=0, max_value=2**31),
    st.binary(min_size=1, max_size=12),
)


def _mutate(data: bytes, mutations: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, where, payload in mutations:
        pos = where % (len(out) + 1)
        if kind == "flip" and out:
            out[pos % len(out)] ^= 1 << (payload[0] % 8)
        elif kind == "truncate":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = payload
        elif kind == "delete":
            del out[pos : pos + len(payload)]
        else:
            out[pos : pos + len(payload)] = payload
    return bytes(out)


def _check_loads_or_trace_error(path: Path) -> None:
    """Reading, streaming and summarising either work or raise a one-line TraceError."""
    try:
        trace_set = load_trace_set(path)
        summary = summarize(trace_set)
        assert summary.ranks == 1
        assert sum(summary.nodes_by_type.values()) == len(trace_set.ranks[0].nodes)
        streamed = list(iter_records(path))
        assert len(streamed) == len(trace_set.ranks[0].nodes)
    except TraceError as exc:
        message = str(exc)
        assert "\n" not in message
        assert str(path) in message


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chakra_fuzz")


@SETTINGS
@given(
    seed=st.sampled_from(ET_SEEDS),
    mutations=st.lists(MUTATION, min_size=1, max_size=4),
)
def test_mutated_et_loads_or_raises_trace_error(
    work_dir: Path, seed: bytes, mutations: list[tuple[str, int, bytes]]
) -> None:
    path = work_dir / "mutated.et"
    path.write_bytes(_mutate(seed, mutations))
    _check_loads_or_trace_error(path)


@settings(SETTINGS, max_examples=25)
@given(
    seed=st.sampled_from(ET_SEEDS),
    mutations=st.lists(MUTATION, min_size=1, max_size=3),
)
def test_mutated_gzip_loads_or_raises_trace_error(
    work_dir: Path, seed: bytes, mutations: list[tuple[str, int, bytes]]
) -> None:
    path = work_dir / "mutated.et.gz"
    path.write_bytes(_mutate(gzip.compress(seed, mtime=0), mutations))
    _check_loads_or_trace_error(path)


@settings(SETTINGS, max_examples=40)
@given(
    seed=st.sampled_from(JSON_TEXT_SEEDS),
    mutations=st.lists(MUTATION, min_size=1, max_size=3),
)
def test_mutated_json_loads_or_raises_trace_error(
    work_dir: Path, seed: bytes, mutations: list[tuple[str, int, bytes]]
) -> None:
    path = work_dir / "mutated.json"
    path.write_bytes(_mutate(seed, mutations))
    _check_loads_or_trace_error(path)


@pytest.mark.parametrize(
    "path", sorted(CORPUS.glob("*")) if CORPUS.is_dir() else [], ids=lambda p: p.name
)
def test_corpus_inputs_load_or_raise_trace_error(path: Path) -> None:
    _check_loads_or_trace_error(path)
