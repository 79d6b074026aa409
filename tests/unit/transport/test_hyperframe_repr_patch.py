"""The cheaper HTTP/2 frame text (`_transport.hyperframe_repr_patch`) that the read session and the lite
server install."""

from __future__ import annotations

import os

import hyperframe.frame
import pytest

import s2_sink._read.session  # noqa: F401  (installs the replacement)


@pytest.mark.parametrize("size", [0, 1, 9, 10, 11, 12, 1 << 20])
def test_a_data_frames_text_is_hyperframes_whatever_its_size(size: int) -> None:
    """Once the read path is imported, a DATA frame's repr is still hyperframe's text (its first ten
    bytes in hex, then ``...`` when there are more), however large the payload."""
    data = os.urandom(size)
    frame = hyperframe.frame.DataFrame(1, data=data)
    body = "<hex:" + data[:10].hex() + ("..." if size > 10 else "") + ">" if data else "None"
    assert repr(frame) == f"DataFrame(stream_id=1, flags=[]): {body}"


def test_importing_the_read_path_or_the_lite_server_installs_the_cheaper_text() -> None:
    """The bulk read session's module and the lite server's HTTP/2 module install it: h2 formats every
    received frame's repr."""
    import s2_sink.lite._http2  # noqa: F401
    from s2_sink._transport import hyperframe_repr_patch as _patch

    assert hyperframe.frame._raw_data_repr is _patch._short_data_repr
