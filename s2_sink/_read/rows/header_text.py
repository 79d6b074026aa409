"""Header lookups over record columns (`s2_sink._wire.read.record_columns.RecordColumns`) for all records at
once, and their binary values as text.

A record's headers are the entries ``header_offsets[i]:header_offsets[i + 1]`` of ``names`` / ``values``,
so "the first header named X of every record" is one comparison over all names and a pass over the hits.

Text: binary -> text exactly as Python's ``bytes.decode("utf-8", errors="replace")``, in bulk where it can be.

Arrow's binary -> string cast validates UTF-8 as strictly as Python (overlong forms, surrogates and code
points past U+10FFFF are refused alike), so an array that casts is the text Python gives. An array holding
any invalid value is decoded value by value, with Python's replacement rules (which Arrow has no kernel
for): the odd input, paid for only by the batches that carry it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from s2_sink._wire.arrow_arrays import bools, call, int64_array, repeated
from s2_sink._wire.layout import Bools, Ints
from s2_sink._wire.read.record_columns import RecordColumns

__all__ = ["entry_owners", "first_header", "named", "take_or_null", "utf8_text"]


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
    taken: pa.Array = call("take", [arr, int64_array(index, valid=index >= 0)])
    return taken


def utf8_text(arr: pa.Array) -> pa.Array:
    """``arr`` (binary) as a string array, invalid UTF-8 sequences replaced by U+FFFD; nulls stay null."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        values: list[bytes | None] = arr.to_pylist()
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values], type=pa.string()
        )
