"""Binary -> text exactly as Python's ``bytes.decode("utf-8", errors="replace")``, in bulk where it can be.

Arrow's binary -> string cast validates UTF-8 as strictly as Python (overlong forms, surrogates and code
points past U+10FFFF are refused alike), so an array that casts is the text Python gives. An array holding
any invalid value is decoded value by value, with Python's replacement rules (which Arrow has no kernel
for): the odd input, paid for only by the batches that carry it.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["utf8_text"]


def utf8_text(arr: pa.Array) -> pa.Array:
    """``arr`` (binary) as a string array, invalid UTF-8 sequences replaced by U+FFFD; nulls stay null."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        values: list[bytes | None] = arr.to_pylist()
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values], type=pa.string()
        )
