"""The cheaper HTTP/2 frame text (`_transport.hyperframe_repr_patch`) that the read session and the lite
server install."""

from __future__ import annotations

import os

import hyperframe.frame
import pytest

import s2_sink._read.session  # noqa: F401  (installs the replacement)


@pytest.mark.parametrize("size", [0, 1, 11, 1 << 20])
def test_a_data_frames_text_names_its_payload_size_whatever_its_size(size: int) -> None:
    """Once the read path is imported, a DATA frame's repr names its payload's size instead of hex-encoding
    the payload (which costs a pass over every byte received)."""
    frame = hyperframe.frame.DataFrame(1, data=os.urandom(size))
    assert repr(frame) == f"DataFrame(stream_id=1, flags=[]): {size}"


def test_importing_the_read_path_or_the_lite_server_installs_the_cheaper_text() -> None:
    """The bulk read session's module and the lite server's HTTP/2 module install it: h2 formats every
    received frame's repr."""
    import s2_sink.lite._http2  # noqa: F401

    assert hyperframe.frame._raw_data_repr is len
