"""Columns over Arrow and numpy: arrays over numpy buffers, numpy views of binary arrays (the buffers the wire
encoder reads and writes), Arrow's kernels called without importing pandas, and `RecordColumns`, the
records of a read held as such columns (what `read_batch` decodes and the read formats turn into rows),
with what every format takes from them alike: the position columns (stream, seq_num, timestamp), the
headers (a list column, or the first header of a name per record), and the cast to the output's types.

A read task runs in a fresh Python worker that has imported neither pandas nor ``pyarrow.compute``.
``pa.array`` and ``pa.scalar`` import pandas on first use (about 0.3 s of CPU) and ``Array.take`` /
``Array.cast`` import ``pyarrow.compute`` (which builds a Python wrapper per kernel), so the read path
builds its arrays from buffers and calls the kernels through ``pyarrow._compute.call_function``, the
function those wrappers call.

A binary array's view has int64 offsets absolute into its data buffer, so values ``[a, b)`` are the
contiguous bytes ``data[offsets[a]:offsets[b]]`` whatever the array's offset (a slice) or offset width.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow._compute as _pc
from s2_sdk import SequencedRecord

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
    "empty_binary",
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
    """An ``int32`` array of ``values`` (list offsets, say; each must fit)."""
    return _numbers(values, pa.int32(), np.int32)


def _numbers(
    values: npt.NDArray[Any], type_: pa.DataType, dtype: Any, valid: Bools | None = None
) -> pa.Array:
    """A ``type_`` array over ``values`` (no copy when they are contiguous `dtype`), null where ``valid`` is
    False."""
    data = np.ascontiguousarray(values, dtype=dtype)
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type_, len(data), [bitmap, pa.py_buffer(data)])


def bool_array(values: Bools) -> pa.Array:
    """A ``bool`` array of ``values`` (bit-packed, as Arrow keeps booleans)."""
    bits = np.packbits(np.asarray(values, dtype=np.bool_), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def repeated(value: bytes | None, count: int, type_: pa.DataType) -> pa.Array:
    """``count`` times ``value`` (None: null) as a ``string`` or ``binary`` array ``type_``."""
    if value is None:
        return pa.nulls(count, type_)
    offsets = np.arange(count + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(offsets), pa.py_buffer(value * count)])


def empty_binary() -> pa.Array:
    """A ``binary`` array of no values."""
    return pa.Array.from_buffers(
        pa.binary(), 0, [None, pa.py_buffer(np.zeros(1, dtype=np.int32)), pa.py_buffer(b"")]
    )


def call(name: str, args: list[Any], options: Any = None) -> Any:
    """Arrow's compute function ``name`` on ``args``, as ``pyarrow.compute.<name>`` calls it."""
    return _pc.call_function(name, args, options)


def take(arr: pa.Array, indices: Ints) -> pa.Array:
    """``arr.take(indices)``."""
    taken: pa.Array = call("take", [arr, _numbers(indices, pa.int64(), np.int64)])
    return taken


def cast(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """``arr.cast(to)`` (safe: values that do not fit raise ``ArrowInvalid``)."""
    out: pa.Array = call("cast", [arr], _pc.CastOptions.safe(to))
    return out


def bools(arr: pa.Array) -> Bools:
    """The values of a ``bool`` array (nulls as False), from its buffers."""
    bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
    values: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return values & valid_rows(arr)


def valid_rows(arr: pa.Array) -> Bools:
    """True where ``arr`` holds a value, from its validity bitmap (a null-typed array has none: all null)."""
    bitmap = arr.buffers()[0]
    if arr.null_count == 0 or bitmap is None:
        return np.full(len(arr), arr.null_count == 0, dtype=np.bool_)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    valid: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return valid


_EMPTY_BYTES: Bytes = np.empty(0, dtype=np.uint8)


class BinaryView(NamedTuple):
    """A binary array as (offsets into data, data): value ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: Ints
    data: Bytes

    @property
    def lengths(self) -> Ints:
        """Byte length of every value."""
        return np.diff(self.offsets)


def binary_view(arr: pa.Array) -> BinaryView:
    """The offsets and data of a binary or large_binary array (nulls read as empty)."""
    width: type[np.int32] | type[np.int64] = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    buffers = arr.buffers()
    if buffers[1] is None:  # a zero-length array may have no offsets buffer at all
        return BinaryView(np.zeros(1, dtype=np.int64), _EMPTY_BYTES)
    offsets = np.frombuffer(buffers[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width().itemsize)
    data = _EMPTY_BYTES if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    return BinaryView(offsets.astype(np.int64), data)


def as_large_binary(arr: pa.Array, what: str) -> pa.Array:
    """``arr`` as large_binary (shares its data buffer); TypeError naming ``what`` unless it is binary."""
    typ = arr.type
    if not (pa.types.is_binary(typ) or pa.types.is_large_binary(typ)):
        raise TypeError(f"{what} must be binary or large_binary, got {typ}")
    return arr if pa.types.is_large_binary(typ) else arr.cast(pa.large_binary())


def large_binary(packed: Packed) -> pa.Array:
    """A large_binary array over packed (offsets, data), without copying either."""
    offsets, data = packed
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, buffers)


Positions = npt.NDArray[np.uint64]
"""seq_nums and timestamps: ``uint64`` on the wire, kept whole."""


class RecordColumns(NamedTuple):
    """The records of one ``ReadBatch`` as columns, in stream order."""

    seq_nums: Positions
    timestamps: Positions
    """Milliseconds, as stored."""
    bodies: pa.Array
    """``binary``, one value per record."""
    header_counts: Ints
    """Headers per record; the headers of record ``i`` are entries ``offsets[i]:offsets[i + 1]``."""
    names: pa.Array
    """``binary``, every header's name in record order."""
    values: pa.Array
    """``binary``, every header's value, aligned with ``names``."""

    def __len__(self) -> int:
        return len(self.seq_nums)

    @property
    def header_offsets(self) -> Ints:
        """Where each record's headers start in ``names`` / ``values`` (``len + 1`` entries)."""
        offsets = np.zeros(len(self.header_counts) + 1, dtype=np.int64)
        np.cumsum(self.header_counts, out=offsets[1:])
        return offsets

    def commands(self) -> Bools:
        """True for command records (exactly one header, with an empty name), as the SDK's
        ``SequencedRecord.is_command_record`` says."""
        single = self.header_counts == 1
        if not single.any():
            none: Bools = single
            return none
        name_lengths = binary_view(self.names).lengths
        empty_name = np.zeros(len(self.header_counts), dtype=np.bool_)
        empty_name[single] = name_lengths[self.header_offsets[:-1][single]] == 0
        both: Bools = single & empty_name
        return both

    def to_records(self) -> list[SequencedRecord]:
        """The SDK's record objects (one per record: for the formats decoded record by record)."""
        offsets = self.header_offsets.tolist()
        names, values = self.names.to_pylist(), self.values.to_pylist()
        seqs, stamps, bodies = self.seq_nums.tolist(), self.timestamps.tolist(), self.bodies.to_pylist()
        return [
            SequencedRecord(
                seq_num=seqs[i],
                body=bodies[i],
                headers=list(
                    zip(names[offsets[i] : offsets[i + 1]], values[offsets[i] : offsets[i + 1]], strict=True)
                ),
                timestamp=stamps[i],
            )
            for i in range(len(seqs))
        ]

    def take(self, rows: Ints | Bools) -> RecordColumns:
        """The records at ``rows`` (indices or a mask), in that order."""
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
    """The records of ``parts`` (at least one), one after the other, as one set of columns."""
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
    """``starts[i] .. starts[i] + counts[i] - 1`` for every i, concatenated."""
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
    """The position column ``name`` of every record of ``stream``: ``stream`` / ``seq_num`` or else the
    timestamp (the formats' names; json's are the same with ``_s2_`` before them)."""
    # Arrays from buffers and kernels called directly: pa.array / pa.scalar would import pandas.
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
    """The rows of ``columns`` in ``target``'s columns and types: those ``made`` makes (only the ones
    asked for), the others the records' positions (`position_column`)."""
    arrays = [
        made[name]() if name in made else position_column(name, stream, columns) for name in target.names
    ]
    return to_target(arrays, target)


def to_target(arrays: list[pa.Array], target: pa.Schema) -> pa.RecordBatch:
    """``arrays`` cast to the types of ``target`` (Spark checks names and then reads the types)."""
    typed = [
        cast(arr, field.type) if arr.type != field.type else arr
        for arr, field in zip(arrays, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(typed, schema=target)


def headers_column(columns: RecordColumns) -> pa.Array:
    """Every record's headers, a list of ``(key, value)`` binary pairs."""
    entries = pa.StructArray.from_arrays([columns.names, columns.values], names=["key", "value"])
    return pa.ListArray.from_arrays(int32_array(columns.header_offsets), entries)


def entry_owners(columns: RecordColumns) -> Ints:
    """The record of every header entry."""
    owners: Ints = np.repeat(np.arange(len(columns), dtype=np.int64), columns.header_counts)
    return owners


def named(columns: RecordColumns, name: bytes) -> Bools:
    """True for every header entry called ``name``."""
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
    """``arr`` at ``index``, null where the index is -1."""
    taken: pa.Array = call("take", [arr, _numbers(index, pa.int64(), np.int64, valid=index >= 0)])
    return taken


def utf8_text(arr: pa.Array) -> pa.Array:
    """``arr`` (binary) as a string array, invalid UTF-8 sequences replaced by U+FFFD, nulls null: Arrow's
    cast validates UTF-8 as strictly as Python, so an array that casts is the text Python's
    ``decode("utf-8", errors="replace")`` gives; any other is decoded value by value (the odd input)."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        values: list[bytes | None] = arr.to_pylist()
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values], type=pa.string()
        )
