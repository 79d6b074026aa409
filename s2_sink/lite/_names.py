"""Basin and stream names, checked as S2 checks them (``common/src/basin.rs``, ``common/src/stream.rs``).

A bad name is refused where it was read, with that place's 400 code: ``bad_path`` for a path segment,
``bad_header`` for the ``s2-basin`` header, ``bad_json`` for a create request's body, ``bad_query`` for a
listing's ``prefix`` or ``start_after`` (S2 refuses it while extracting the request, before any lookup).
"""

from __future__ import annotations

from typing import Literal

from s2_sink.lite._api_errors import bad

__all__ = ["Where", "validate_basin_name", "validate_stream_name"]

Where = Literal["bad_path", "bad_header", "bad_json", "bad_query"]
"""The 400 code of the place a name was read from."""

MIN_BASIN = 8
MAX_BASIN = 48
MAX_STREAM = 512


def _basin_char(c: str) -> bool:
    return ("a" <= c <= "z") or ("0" <= c <= "9")


def validate_basin_name(name: str, where: Where = "bad_path", *, prefix: bool = False) -> None:
    """8-48 bytes of lowercase letters, digits and hyphens, beginning and ending with a letter or digit
    (a ``prefix`` may be shorter, or empty, and end with a hyphen)."""
    what = "prefix" if prefix else "name"
    if len(name.encode()) > MAX_BASIN:
        raise bad(where, f"basin {what} must not exceed {MAX_BASIN} bytes in length, got {name!r}")
    if not prefix and len(name.encode()) < MIN_BASIN:
        raise bad(where, f"basin {what} should be at least {MIN_BASIN} bytes in length, got {name!r}")
    if not name:
        return
    if not _basin_char(name[0]):
        raise bad(where, f"basin {what} must begin with a lowercase letter or number, got {name!r}")
    if not prefix and len(name) > 1 and not _basin_char(name[-1]):
        raise bad(where, f"basin {what} must end with a lowercase letter or number, got {name!r}")
    if any(not (_basin_char(c) or c == "-") for c in name):
        raise bad(where, f"basin {what} must comprise lowercase letters, numbers, and hyphens, got {name!r}")


def validate_stream_name(name: str, where: Where = "bad_path", *, prefix: bool = False) -> None:
    """1-512 bytes of UTF-8, not ``.`` or ``..`` (a ``prefix`` may be empty)."""
    what = "prefix" if prefix else "name"
    if not prefix and not name:
        raise bad(where, f"stream {what} must not be empty")
    if not prefix and name in (".", ".."):
        raise bad(where, f'stream {what} must not be "." or ".."')
    if len(name.encode()) > MAX_STREAM:
        raise bad(where, f"stream {what} must not exceed {MAX_STREAM} bytes in length")
