"""A cheaper text for HTTP/2 frame payloads, installed by every HTTP/2 peer here that receives bulk DATA
(the read session, the lite server): h2 formats ``repr(frame)`` for its trace log on every frame it receives,
even with logging off, and hyperframe's repr hex-encodes the whole payload first. The replacement is ``len``.
"""

from __future__ import annotations

import hyperframe.frame

__all__ = ["install"]


def install() -> None:
    """Replace hyperframe's payload text (idempotent; a hyperframe without it is left alone)."""
    if hasattr(hyperframe.frame, "_raw_data_repr"):
        hyperframe.frame._raw_data_repr = len  # type: ignore[assignment]  # any text goes in an f-string
