"""The s2.v1 append messages' field keys, the small pieces the record encoder joins, the layout of key +
varint fields over numpy (one numpy pass per varint byte, never a Python step per row), and a record's
``headers`` fields in bulk: its own (a list column: every entry serialized once, a row's consecutive entries
then one value by offsets alone), and leading ones (one name, a value column, e.g. the upsert
``@key``/``@action``: no list at all, or one constant where every row holds the same value).

Field keys are ``(field number << 3) | wire type`` (0 = varint, 2 = length-delimited)::

    AppendInput  = { AppendRecord records = 1 (repeated); uint64 match_seq_num = 2 (optional);
                     string fencing_token = 3 (optional) }
    AppendRecord = { uint64 timestamp = 1 (optional); Header headers = 2 (repeated); bytes body = 3 }
    Header       = { bytes name = 1; bytes value = 2 }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire.columns import (
    BinaryView,
    Bools,
    Bytes,
    Ints,
    Packed,
    as_large_binary,
    binary_view,
    large_binary,
    valid_rows,
)
from s2_sink.encoders._frame import BODY, HEADERS
from s2_sink.errors import EncodeError

__all__ = [
    "HEADER_NAME",
    "HEADER_VALUE",
    "INPUT_FENCING_TOKEN",
    "INPUT_MATCH_SEQ_NUM",
    "INPUT_RECORDS",
    "RECORD_BODY",
    "RECORD_HEADERS",
    "RECORD_TIMESTAMP",
    "Header",
    "LeadingHeader",
    "Part",
    "VarintField",
    "check_leading",
    "check_length",
    "field",
    "headers_bytes",
    "join",
    "leading_fields",
    "no_bytes",
    "own_headers",
    "pack_fields",
    "varint",
    "varint_sizes",
]

INPUT_RECORDS: Final = 0x0A
INPUT_MATCH_SEQ_NUM: Final = 0x10
INPUT_FENCING_TOKEN: Final = 0x1A
RECORD_TIMESTAMP: Final = 0x08
RECORD_HEADERS: Final = 0x12
RECORD_BODY: Final = 0x1A
HEADER_NAME: Final = 0x0A
HEADER_VALUE: Final = 0x12

Values = npt.NDArray[np.int64] | npt.NDArray[np.uint64]

# Smallest value needing 2, 3, ... 10 varint bytes.
_THRESHOLDS: Final = tuple(1 << (7 * k) for k in range(1, 10))

VarintField = tuple[Bools | None, int | bytes, Values | None, Ints | None]
"""One field of every row: (present, None = in every row; the key, a byte or several; the varint values
and their `varint_sizes`, or None, None for the key bytes alone)."""


def join(*columns: pa.Array | pa.Scalar) -> pa.Array:
    # the separator made here, not at import: pyarrow's first scalar conversion imports pandas
    return pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()))


def no_bytes(n: int) -> pa.Array:
    return large_binary((np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8)))


def check_length(column: pa.Array, rows: int, what: str) -> None:
    if len(column) != rows:
        raise ValueError(f"{what} has {len(column)} rows but {BODY} has {rows}")


def field(key: int, payload: bytes) -> bytes:
    return bytes([key]) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_sizes(values: Values) -> Ints:
    """Values must be non-negative."""
    sizes = np.ones(len(values), dtype=np.int64)
    if len(values) == 0:
        return sizes
    top = int(values.max())
    for threshold in _THRESHOLDS:
        if top < threshold:
            break
        sizes += values >= threshold
    return sizes


def pack_fields(rows: int, fields: Sequence[VarintField]) -> Packed:
    # A field in every row or in none (a body-only frame's bodies and unset timestamps) needs no mask.
    fields = [
        (None, key, values, sizes) if present is not None and present.all() else (present, key, values, sizes)
        for present, key, values, sizes in fields
        if present is None or present.any()
    ]
    if rows == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    # Written column by column into rows as wide as the longest, then the bytes past each row's own
    # fields dropped in one pass: strided column writes cost less than scattering every byte.
    heads = [
        np.frombuffer(bytes([key]) if isinstance(key, int) else key, dtype=np.uint8)
        for _, key, _, _ in fields
    ]
    widths = [
        len(h) + (0 if sizes is None else int(sizes.max()))
        for h, (_, _, _, sizes) in zip(heads, fields, strict=True)
    ]
    grid: Bytes = np.empty((rows, sum(widths)), dtype=np.uint8)
    keep: Bools | None = None  # which bytes of `grid` are the rows' own (None: all of them)
    lengths = np.zeros(rows, dtype=np.int64)
    column = 0
    for (present, _, values, sizes), head, width in zip(fields, heads, widths, strict=True):
        grid[:, column : column + len(head)] = head
        at = column + len(head)  # the varint's first byte
        row_width: Ints | int = len(head)
        if values is not None and sizes is not None:
            rest = values.astype(np.uint64)
            for k in range(width - len(head)):
                byte = (rest & 0x7F).astype(np.uint8)
                byte[sizes > k + 1] |= 0x80
                grid[:, at + k] = byte
                rest >>= 7
            row_width = len(head) + sizes
            if present is not None or int(sizes.min()) + len(head) < width:
                if keep is None:
                    keep = np.ones(grid.shape, dtype=np.bool_)
                for k in range(1, width - len(head)):  # the first varint byte is always written
                    keep[:, at + k] = sizes > k
        if present is not None:
            if keep is None:
                keep = np.ones(grid.shape, dtype=np.bool_)
            keep[:, column : column + width] &= present[:, None]
        lengths += row_width if present is None else np.where(present, row_width, 0)
        column += width
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out: Bytes = grid.reshape(-1) if keep is None else grid[keep]
    return offsets, out


Header = tuple[bytes, bytes]
LeadingHeader = tuple[bytes, pa.Array]
"""A header every row carries first: its name, and a binary column of each row's value."""

Part: TypeAlias = pa.Array | list[VarintField]
"""A piece of every record: a binary column, or small fields numpy packs with those beside them into one
column (`fields.pack_fields`)."""


def own_headers(headers: pa.Array | None, rows: int, first: int, n: int) -> pa.Array:
    if headers is not None:
        check_length(headers, rows, HEADERS)
    if headers is None or pa.types.is_null(headers.type):
        return no_bytes(n)
    typ = headers.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_struct(typ.value_type):
        raise TypeError(f"{HEADERS} must be list<struct<name: binary, value: binary>>, got {typ}")
    fields = [f.name for f in typ.value_type]
    if "name" not in fields or "value" not in fields:
        raise TypeError(f"{HEADERS} entries must have fields 'name' and 'value', got {typ.value_type}")
    column = headers.slice(first, n)
    count = column.value_lengths().fill_null(0).to_numpy().astype(np.int64)
    # flatten() keeps only non-null rows' entries; the struct's applies its offset and bitmap to the children.
    children = column.flatten().flatten()
    name, value = children[fields.index("name")], children[fields.index("value")]
    for child, what in ((name, "name"), (value, "value")):
        if child.null_count:
            entry = int(np.argmin(valid_rows(child)))
            row = first + int(np.searchsorted(np.cumsum(count), entry, side="right"))
            raise EncodeError(
                f"{HEADERS} has a null header {what} in row {row}: header names and values are "
                f"bytes (use b'' for an empty one)"
            )
    if len(name) == 0:
        return no_bytes(n)
    names = as_large_binary(name, f"{HEADERS}.name")
    values = as_large_binary(value, f"{HEADERS}.value")
    name_len, value_len = binary_view(names).lengths, binary_view(values).lengths
    name_size, value_size = varint_sizes(name_len), varint_sizes(value_len)
    header_len = np.where(name_len > 0, 1 + name_size + name_len, 0) + np.where(
        value_len > 0, 1 + value_size + value_len, 0
    )
    entries = len(names)
    header_key = (None, RECORD_HEADERS, header_len, varint_sizes(header_len))
    name_key = (name_len > 0, HEADER_NAME, name_len, name_size)
    value_key = (value_len > 0, HEADER_VALUE, value_len, value_size)
    fields_bytes = join(
        large_binary(pack_fields(entries, [header_key, name_key])),
        names,
        large_binary(pack_fields(entries, [value_key])),
        values,
    )
    # A row's header fields are consecutive entries: one value spanning them, by offsets alone.
    first_entry = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=first_entry[1:])
    offsets = binary_view(fields_bytes).offsets[first_entry]
    data = fields_bytes.buffers()[2]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), data])


def leading_fields(leading: Sequence[LeadingHeader], first: int, n: int) -> tuple[list[Part], Ints]:
    """The `leading` headers' fields of rows ``first:first + n`` as `Part`s, and their bytes per row."""
    parts: list[Part] = []
    total = np.zeros(n, dtype=np.int64)
    for name, column in leading:
        values = as_large_binary(column.slice(first, n), f"leading header {name!r}")
        if values.null_count:
            row = first + int(np.argmin(valid_rows(values)))
            raise EncodeError(
                f"leading header {name!r} has a null value in row {row}: header values are bytes "
                "(use b'' for an empty one)"
            )
        view = binary_view(values)
        named = field(HEADER_NAME, name) if name else b""  # the same bytes in every row
        same = _same_value(view)
        if same is not None:  # e.g. @action of a batch of upserts only: the same header in every row
            header = field(RECORD_HEADERS, named + (field(HEADER_VALUE, same) if same else b""))
            parts.append([(None, header, None, None)])
            total += len(header)
            continue
        value_len = view.lengths
        value_size = varint_sizes(value_len)
        header_len = len(named) + np.where(value_len > 0, 1 + value_size + value_len, 0)
        header_size = varint_sizes(header_len)
        fields: list[VarintField] = [(None, RECORD_HEADERS, header_len, header_size)]
        if value_len.min() > 0:  # the name's bytes and the value's key in one
            fields.append((None, named + bytes([HEADER_VALUE]), value_len, value_size))
        else:
            fields += [(None, named, None, None)] if named else []
            fields.append((value_len > 0, HEADER_VALUE, value_len, value_size))
        parts += [fields, values]
        total += 1 + header_size + header_len
    return parts, total


def _same_value(view: BinaryView) -> bytes | None:
    lengths = view.lengths
    if not len(lengths) or lengths.min() != lengths.max() or lengths[0] > _SAME_VALUE_BYTES:
        return None
    width = int(lengths[0])
    rows = view.data[view.offsets[0] : view.offsets[-1]].reshape(len(lengths), width)
    return rows[0].tobytes() if (rows == rows[0]).all() else None


#: Values up to this long are looked at for one shared by every row (a code, a flag, a version).
_SAME_VALUE_BYTES: Final = 16


def check_leading(leading: Sequence[LeadingHeader], rows: int) -> None:
    for name, column in leading:
        check_length(column, rows, f"leading header {name!r}")


def headers_bytes(headers: Sequence[Header]) -> bytes:
    out = bytearray()
    for name, value in headers:
        header = (field(HEADER_NAME, name) if name else b"") + (field(HEADER_VALUE, value) if value else b"")
        out += field(RECORD_HEADERS, header)
    return bytes(out)
