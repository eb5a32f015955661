"""The `.et` wire form: varint32 length-prefixed protobuf messages, a GlobalMetadata then Nodes.

This is what Chakra's own tools write and read (mlcommons/chakra
src/third_party/utils/protolib.py encodeMessage/decodeMessage: `_VarintBytes(len)` + payload,
read back with `_DecodeVarint32`). Framing uses protobuf's own varint decoder; message bytes are
only ever parsed by protobuf. For speed, records are parsed in batches: a record's prefix already
is the length of a length-delimited field, so putting the tag of a `repeated Node` field in front
of each record turns a run of records into one `NodeBatch` message that protobuf parses in a
single C call, instead of one Python-level ParseFromString per node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import decoder, encoder
from google.protobuf.message import DecodeError

from emulator.chakra import et_def_pb2 as pb
from emulator.chakra.names import one_line
from emulator.errors import TraceError

# protobuf's own varint codec, as chakra's protolib uses it (not in the typeshed stubs).
_DecodeVarint32: Callable[[bytes, int], tuple[int, int]]
_DecodeVarint32 = decoder._DecodeVarint32  # type: ignore[attr-defined]
_VarintBytes: Callable[[int], bytes] = encoder._VarintBytes  # type: ignore[attr-defined]

# A length prefix for a 32-bit length never needs more than 5 varint bytes.
MAX_PREFIX_BYTES = 5
# Records per NodeBatch parse when reading a whole file; bounds the extra copy made for batching.
BATCH_RECORDS = 1 << 16
# Records per batch when streaming (iter_records): bounds what one batch keeps alive.
STREAM_BATCH_RECORDS = 1 << 10
# Tag of `repeated ChakraProtoMsg.Node nodes = 1` (field 1, wire type 2: length-delimited).
_NODES_TAG = bytes([(1 << 3) | 2])


def _node_batch_class() -> Any:
    """`message NodeBatch { repeated ChakraProtoMsg.Node nodes = 1; }`, built at import time."""
    pool = descriptor_pool.Default()
    name = "emulator_chakra_node_batch.proto"
    try:
        descriptor = pool.FindMessageTypeByName("emulator_chakra.NodeBatch")
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(
            name=name, package="emulator_chakra", syntax="proto3", dependency=["et_def.proto"]
        )
        message = proto.message_type.add(name="NodeBatch")
        message.field.add(
            name="nodes",
            number=1,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
            type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
            type_name=".ChakraProtoMsg.Node",
        )
        pool.Add(proto)
        descriptor = pool.FindMessageTypeByName("emulator_chakra.NodeBatch")
    return message_factory.GetMessageClass(descriptor)


NodeBatch = _node_batch_class()


def _prefix_error(source: str, data: bytes, index: int, start: int) -> TraceError:
    """Explain why the length prefix of record `index` starting at byte `start` is unusable."""
    what = "GlobalMetadata record" if index == 0 else f"record {index}"
    where = f"{source}: {what} at byte {start}"
    try:
        length, after = _DecodeVarint32(data, start)
    except IndexError:
        return TraceError(f"{where}: length prefix cut off by the end of the file")
    except DecodeError:
        return TraceError(f"{where}: length prefix is an over-long varint")
    if after - start > MAX_PREFIX_BYTES:
        return TraceError(f"{where}: length prefix is an over-long varint ({after - start} bytes)")
    return TraceError(
        f"{where}: length prefix says {length} bytes but only {len(data) - after} remain "
        "(truncated file?)"
    )


def _parse_metadata(data: bytes, source: str) -> tuple[pb.GlobalMetadata, int]:
    """Parse record 0; return it and the position after it."""
    if not data:
        raise TraceError(f"{source}: empty file (a trace starts with a GlobalMetadata record)")
    try:
        length, pos = _DecodeVarint32(data, 0)
    except (IndexError, DecodeError):
        raise _prefix_error(source, data, 0, 0) from None
    stop = pos + length
    if stop > len(data) or pos > MAX_PREFIX_BYTES:
        raise _prefix_error(source, data, 0, 0)
    metadata = pb.GlobalMetadata()
    try:
        metadata.ParseFromString(data[pos:stop])
    except DecodeError as exc:
        raise TraceError(f"{source}: GlobalMetadata record at byte 0: {one_line(exc)}") from None
    return metadata, stop


def parse_delimited(data: bytes, source: str) -> tuple[pb.GlobalMetadata, list[pb.Node], list[str]]:
    """Whole `.et` bytes -> (metadata, nodes in file order, warnings). Raises TraceError."""
    metadata, pos = _parse_metadata(data, source)
    nodes: list[pb.Node] = []
    empty_records: list[int] = []
    for batch in _node_batches(data, source, pos, BATCH_RECORDS, empty_records):
        nodes.extend(batch)
    warnings = []
    if empty_records:
        warnings.append(f"{len(empty_records)} zero-length node record(s) skipped")
    return metadata, nodes, warnings


def iter_delimited(data: bytes, source: str) -> Iterator[pb.Node]:
    """Nodes in file order, parsed a batch at a time (the GlobalMetadata is checked, not yielded)."""
    _metadata, pos = _parse_metadata(data, source)
    for batch in _node_batches(data, source, pos, STREAM_BATCH_RECORDS, []):
        yield from batch


def _node_batches(
    data: bytes, source: str, pos: int, batch_records: int, empty_records: list[int]
) -> Iterator[Sequence[pb.Node]]:
    """Frame the records from `pos` on and parse them `batch_records` at a time.

    Zero-length records (empty nodes) are skipped; their indexes go to `empty_records`.
    """
    view = memoryview(data)
    end = len(data)
    decode = _DecodeVarint32
    parts: list[Any] = []
    append = parts.append
    tag = _NODES_TAG
    index = 1
    chunk_start, chunk_index = pos, index
    while pos < end:
        start = pos
        try:
            length, pos = decode(data, pos)
        except (IndexError, DecodeError):
            raise _prefix_error(source, data, index, start) from None
        stop = pos + length
        if stop > end or pos - start > MAX_PREFIX_BYTES:
            raise _prefix_error(source, data, index, start)
        if length:
            append(tag)
            append(view[start:stop])
        else:
            empty_records.append(index)
        pos = stop
        index += 1
        if len(parts) >= 2 * batch_records:
            yield _parse_batch(parts, data, source, chunk_start, chunk_index)
            parts.clear()
            chunk_start, chunk_index = pos, index
    if parts:
        yield _parse_batch(parts, data, source, chunk_start, chunk_index)


def _parse_batch(
    parts: list[Any], data: bytes, source: str, start: int, index: int
) -> Sequence[pb.Node]:
    batch = NodeBatch()
    try:
        batch.ParseFromString(b"".join(parts))
    except DecodeError:
        # Slow path, errors only: find the record that does not parse on its own.
        _locate_bad_record(data, source, start, index, len(parts) // 2)
        raise TraceError(
            f"{source}: records {index}.. starting at byte {start} cannot be parsed as Nodes"
        ) from None
    nodes: Sequence[pb.Node] = batch.nodes
    return nodes


def _locate_bad_record(data: bytes, source: str, pos: int, index: int, count: int) -> None:
    seen = 0
    while seen < count and pos < len(data):
        length, payload = _DecodeVarint32(data, pos)
        if length:
            try:
                pb.Node().ParseFromString(data[payload : payload + length])
            except DecodeError as exc:
                raise TraceError(
                    f"{source}: record {index} at byte {pos} is not a valid Node: {one_line(exc)}"
                ) from None
            seen += 1
        pos = payload + length
        index += 1


def encode_delimited(messages: Iterable[Any]) -> bytes:
    """Messages -> `.et` bytes, exactly as Chakra's encodeMessage writes them."""
    chunks: list[bytes] = []
    append = chunks.append
    for message in messages:
        payload = message.SerializeToString()
        append(_VarintBytes(len(payload)))
        append(payload)
    return b"".join(chunks)
