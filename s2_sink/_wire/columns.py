"""Arrow arrays over numpy buffers and numpy views of binary arrays (what the wire code reads and writes),
and `RecordColumns`, a read's records as columns, with what every read format takes from them alike.

A read task runs in a fresh worker: ``pa.array``/``pa.scalar`` would import pandas and ``Array.take``/
``Array.cast`` ``pyarrow.compute``, a fixed cost per task, so arrays are built from buffers here and
kernels called through ``pyarrow._compute.call_function``, what those wrappers call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow._compute as _pc

__all__ = [
    "BinaryView",
    "Bools",
    "Bytes",
    "Ints",
    "Packed",
    "Positions",
    "RecordColumns",
    "StreamRuns",
    "as_large_binary",
    "binary_view",
    "bool_array",
    "bools",
    "call",
    "cast",
    "concat_columns",
    "entry_owners",
    "first_header",
    "headers_column",
    "int32_array",
    "large_binary",
    "named",
    "position_column",
    "repeated",
    "rows_batch",
    "take",
    "take_or_null",
    "to_target",
    "utf8_text",
    "valid_rows",
]


Bools = npt.NDArray[np.bool_]
Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Packed = tuple[Ints, Bytes]
"""Variable-length rows as (offsets, data): row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""


def int32_array(values: np.ndarray[Any, np.dtype[np.int32]] | Ints) -> pa.Array:
    return _numbers(values, pa.int32(), np.int32)


def _numbers(
    values: npt.NDArray[Any], type_: pa.DataType, dtype: Any, valid: Bools | None = None
) -> pa.Array:
    """No copy when ``values`` are contiguous `dtype`; null where ``valid`` is False."""
    data = np.ascontiguousarray(values, dtype=dtype)
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, len(data), [bitmap, pa.py_buffer(data)])


def bool_array(values: Bools) -> pa.Array:
    bits = np.packbits(np.asarray(values, dtype=np.bool_), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def repeated(value: bytes | None, count: int, type_: pa.DataType) -> pa.Array:
    """``count`` times ``value`` (None: null) as a ``string`` or ``binary`` array."""
    if value is None:
        return pa.nulls(count, type_)
    offsets = np.arange(count + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(offsets), pa.py_buffer(value * count)])


def call(name: str, args: list[Any], options: Any = None) -> Any:
    return _pc.call_function(name, args, options)


def take(arr: pa.Array, indices: Ints) -> pa.Array:
    taken: pa.Array = call("take", [arr, _numbers(indices, pa.int64(), np.int64)])
    return taken


def cast(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """Safe: values that do not fit raise ``ArrowInvalid``."""
    out: pa.Array = call("cast", [arr], _pc.CastOptions.safe(to))
    return out


def bools(arr: pa.Array) -> Bools:
    """Nulls as False."""
    return _bits(arr.buffers()[1], arr) & valid_rows(arr)


def valid_rows(arr: pa.Array) -> Bools:
    """A null-typed array has no bitmap: all null."""
    bitmap = arr.buffers()[0]
    if arr.null_count == 0 or bitmap is None:
        return np.full(len(arr), arr.null_count == 0, dtype=np.bool_)
    return _bits(bitmap, arr)


def _bits(buffer: pa.Buffer, arr: pa.Array) -> Bools:
    bits = np.unpackbits(np.frombuffer(buffer, dtype=np.uint8), bitorder="little")
    values: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return values


_EMPTY_BYTES: Bytes = np.empty(0, dtype=np.uint8)


class BinaryView(NamedTuple):
    """A binary array's int64 offsets, absolute into its data buffer, and that buffer: values ``[a, b)``
    are ``data[offsets[a]:offsets[b]]`` whatever the array's offset or offset width."""

    offsets: Ints
    data: Bytes

    @property
    def lengths(self) -> Ints:
        return np.diff(self.offsets)


def binary_view(arr: pa.Array) -> BinaryView:
    """Nulls read as empty."""
    width: type[np.int32] | type[np.int64] = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    buffers = arr.buffers()
    if buffers[1] is None:  # a zero-length array may have no offsets buffer at all
        return BinaryView(np.zeros(1, dtype=np.int64), _EMPTY_BYTES)
    offsets = np.frombuffer(buffers[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width().itemsize)
    data = _EMPTY_BYTES if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    return BinaryView(offsets.astype(np.int64), data)


def as_large_binary(arr: pa.Array, what: str) -> pa.Array:
    """Shares ``arr``'s data buffer; TypeError naming ``what`` unless it is binary."""
    typ = arr.type
    if not (pa.types.is_binary(typ) or pa.types.is_large_binary(typ)):
        raise TypeError(f"{what} must be binary or large_binary, got {typ}")
    return arr if pa.types.is_large_binary(typ) else arr.cast(pa.large_binary())


def large_binary(packed: Packed) -> pa.Array:
    offsets, data = packed
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, buffers)


Positions = npt.NDArray[np.uint64]
"""seq_nums and timestamps: ``uint64`` on the wire, kept whole."""


class RecordColumns(NamedTuple):
    """The records of one ``ReadBatch`` as columns, in stream order."""

    seq_nums: Positions
    timestamps: Positions
    bodies: pa.Array
    header_counts: Ints
    names: pa.Array
    """Every header's name in record order (``values`` aligned with it)."""
    values: pa.Array

    def __len__(self) -> int:
        return len(self.seq_nums)

    @property
    def header_offsets(self) -> Ints:
        """Where each record's headers start in ``names`` (``len + 1`` entries)."""
        offsets = np.zeros(len(self.header_counts) + 1, dtype=np.int64)
        np.cumsum(self.header_counts, out=offsets[1:])
        return offsets

    def commands(self) -> Bools:
        """As the SDK's ``SequencedRecord.is_command_record``: exactly one header, with an empty name."""
        single = self.header_counts == 1
        if not single.any():
            none: Bools = single
            return none
        name_lengths = binary_view(self.names).lengths
        empty_name = np.zeros(len(self.header_counts), dtype=np.bool_)
        empty_name[single] = name_lengths[self.header_offsets[:-1][single]] == 0
        both: Bools = single & empty_name
        return both

    def take(self, rows: Ints | Bools) -> RecordColumns:
        index: Ints = np.flatnonzero(rows) if rows.dtype == np.bool_ else rows.astype(np.int64, copy=False)
        offsets = self.header_offsets
        counts = self.header_counts[index]
        entries = _ranges(offsets[:-1][index], counts)
        return RecordColumns(
            self.seq_nums[index],
            self.timestamps[index],
            take(self.bodies, index),
            counts,
            take(self.names, entries),
            take(self.values, entries),
        )


def concat_columns(parts: Sequence[RecordColumns]) -> RecordColumns:
    if len(parts) == 1:
        return parts[0]
    return RecordColumns(
        np.concatenate([p.seq_nums for p in parts]),
        np.concatenate([p.timestamps for p in parts]),
        pa.concat_arrays([p.bodies for p in parts]),
        np.concatenate([p.header_counts for p in parts]),
        pa.concat_arrays([p.names for p in parts]),
        pa.concat_arrays([p.values for p in parts]),
    )


def _ranges(starts: Ints, counts: Ints) -> Ints:
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    shift = np.repeat(starts - (ends - counts), counts)
    out: Ints = np.arange(total, dtype=np.int64) + shift
    return out


class StreamRuns(NamedTuple):
    """Whose records a batch of several streams holds: ``(stream, records)`` runs, in record order."""

    runs: tuple[tuple[str, int], ...]

    def __repr__(self) -> str:
        return ", ".join(repr(stream) for stream, _ in self.runs)


def _stream_column(stream: str | StreamRuns, count: int) -> pa.Array:
    if isinstance(stream, str):
        return repeated(stream.encode(), count, pa.string())
    names = [name.encode() for name, _ in stream.runs]
    counts = np.array([n for _, n in stream.runs], dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.repeat(np.array([len(b) for b in names], dtype=np.int32), counts), out=offsets[1:])
    data = b"".join(name * int(n) for name, n in zip(names, counts, strict=True))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def position_column(name: str, stream: str | StreamRuns, columns: RecordColumns) -> pa.Array:
    """``stream``, ``seq_num`` or else the timestamp (json's names have ``_s2_`` before them)."""
    if name in ("stream", "_s2_stream"):
        return _stream_column(stream, len(columns))
    if name in ("seq_num", "_s2_seq_num"):
        return cast(_numbers(columns.seq_nums, pa.uint64(), np.uint64), pa.int64())
    # Checked arithmetic and casts: a timestamp past what Spark holds fails, as on the record path.
    thousand = _numbers(np.full(len(columns), 1000, dtype=np.uint64), pa.uint64(), np.uint64)
    micros = call("multiply_checked", [_numbers(columns.timestamps, pa.uint64(), np.uint64), thousand])
    return cast(cast(micros, pa.int64()), pa.timestamp("us", tz="UTC"))


def rows_batch(
    target: pa.Schema,
    stream: str | StreamRuns,
    columns: RecordColumns,
    made: Mapping[str, Callable[[], pa.Array]],
) -> pa.RecordBatch:
    """``target``'s columns: those ``made`` makes (only the ones asked for), the others positions."""
    arrays = [
        made[name]() if name in made else position_column(name, stream, columns) for name in target.names
    ]
    return to_target(arrays, target)


def to_target(arrays: list[pa.Array], target: pa.Schema) -> pa.RecordBatch:
    """Spark checks the names and then reads the types."""
    typed = [
        cast(arr, field.type) if arr.type != field.type else arr
        for arr, field in zip(arrays, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(typed, schema=target)


def headers_column(columns: RecordColumns) -> pa.Array:
    entries = pa.StructArray.from_arrays([columns.names, columns.values], names=["key", "value"])
    return pa.ListArray.from_arrays(int32_array(columns.header_offsets), entries)


def entry_owners(columns: RecordColumns) -> Ints:
    owners: Ints = np.repeat(np.arange(len(columns), dtype=np.int64), columns.header_counts)
    return owners


def named(columns: RecordColumns, name: bytes) -> Bools:
    same = call("equal", [columns.names, repeated(name, len(columns.names), pa.binary())])
    return bools(same)


def first_header(columns: RecordColumns, name: bytes, owners: Ints | None = None) -> Ints:
    """Per record, the entry of its first header called ``name``; -1 where it has none."""
    first = np.full(len(columns), -1, dtype=np.int64)
    hits = np.flatnonzero(named(columns, name))
    if hits.size:
        whose = (entry_owners(columns) if owners is None else owners)[hits]
        # Entries are in record order: a record's first hit is where the owner changes.
        leads = np.ones(hits.size, dtype=np.bool_)
        leads[1:] = whose[1:] != whose[:-1]
        first[whose[leads]] = hits[leads]
    return first


def take_or_null(arr: pa.Array, index: Ints) -> pa.Array:
    """Null where the index is -1."""
    taken: pa.Array = call("take", [arr, _numbers(index, pa.int64(), np.int64, valid=index >= 0)])
    return taken


def utf8_text(arr: pa.Array) -> pa.Array:
    """Python's ``decode("utf-8", errors="replace")``: Arrow's cast validates as strictly, so only an array
    that fails it is decoded value by value."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        values: list[bytes | None] = arr.to_pylist()
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values], type=pa.string()
        )
