"""The stream-name rule (`s2_sink._stream_names`) against S2's own.

S2's rule is s2-lite's ``StreamNameStr::validate_str`` with ``NameProps`` (``common/src/stream.rs`` of
s2-streamstore/s2, whose tests ``validate_name_ok``/``validate_name_err`` the cases below follow) and
``caps::MAX_STREAM_NAME_LEN`` = 512 bytes (``common/src/caps.rs``); the Python SDK's ``validate_stream``
(``s2_sdk/_validators.py``) also refuses NUL before sending.
"""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from s2_sdk import S2ClientError
from s2_sdk._validators import validate_stream

from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink._stream_names import BOOKKEEPING_PREFIX, shown, stream_name_problem, target_problem
from s2_sink._write.driver.routing import Routing
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError
from s2_sink.lite import LiteServer

VALID = ["my-stream", "a" * 512, "é" * 256, "...", "./a", "a/..", " ", "events/eu", "_s2sink", "x/_s2sink/y"]
"""Names S2 accepts: the official ``normal`` and ``max_len`` cases, 512 bytes of two-byte characters, and
dots or prefixes that are only close to a refused name."""

INVALID = {
    "": "it is empty",
    ".": "S2 refuses '.' and '..'",
    "..": "S2 refuses '.' and '..'",
    "a" * 513: "it is 513 bytes of UTF-8, over S2's limit of 512",
    "é" * 257: "it is 514 bytes of UTF-8, over S2's limit of 512",
    "a\0b": "it contains a NUL character",
    "bad-\udcff": "it is not valid UTF-8",
}
"""The official ``empty``, ``dot``, ``dot_dot`` and ``too_long`` cases (the limit is bytes, not
characters: 257 two-byte characters are over it), the SDK's NUL, and text that is not UTF-8 (how
`stream_texts` carries such bytes from Spark)."""


@pytest.mark.parametrize("name", VALID)
def test_names_s2_accepts_are_valid(name: str) -> None:
    """Every name S2 accepts passes the rule."""
    assert stream_name_problem(name) is None


@pytest.mark.parametrize(("name", "reason"), INVALID.items())
def test_names_s2_refuses_are_invalid_with_the_reason(name: str, reason: str) -> None:
    """Every name S2 (or the SDK) refuses fails the rule, saying why in words."""
    assert stream_name_problem(name) == f"is not a valid S2 stream name: {reason}"


@given(st.text(max_size=600))
def test_the_rule_accepts_only_what_the_sdk_would_send(name: str) -> None:
    """Any text the rule accepts the SDK accepts (the SDK misses only '.' and '..', which S2 refuses)."""
    if stream_name_problem(name) is None:
        validate_stream(name)
    elif name not in (".", ".."):
        with pytest.raises((S2ClientError, UnicodeEncodeError)):
            validate_stream(name)


def test_the_sinks_bookkeeping_streams_are_no_target() -> None:
    """Every stream the exactly-once protocol keeps is under the reserved prefix, and a target there is
    refused (a valid S2 name all the same); names merely near it are fine."""
    for prefix in (LEDGER_PREFIX, REGISTER_PREFIX):
        assert prefix.startswith(BOOKKEEPING_PREFIX)
        assert stream_name_problem(prefix + "w") is None
        assert target_problem(prefix + "w") == (
            "is among the sink's exactly-once ledgers and registers (under '_s2sink/'), where no rows may go"
        )
    for name in ("_s2sink", "_s2sinks/x", "x/_s2sink/ledger/w"):
        assert target_problem(name) is None
    assert target_problem("") == stream_name_problem("")


def test_shown_cuts_long_values() -> None:
    """Error messages show a value's repr, cut after 40 characters with its length."""
    assert shown("events") == "'events'"
    assert shown("x" * 600) == f"{'x' * 40!r}... (600 characters)"


def test_configured_names_are_checked_on_the_driver() -> None:
    """A configured stream breaking S2's rule, a write target or shard names in the bookkeeping or over
    the limit are ConfigErrors naming the setting and the value, before anything runs."""
    with pytest.raises(ConfigError, match=r"stream \(s2\.stream\) '\.\.' is not a valid S2 stream name"):
        S2Config(basin="some-basin", stream="..")
    with pytest.raises(ConfigError, match=r"'_s2sink/ledger/w' \(S2Config.stream, s2.stream\) is among"):
        Routing.build(stream="_s2sink/ledger/w", stream_column=None, shards=None)
    with pytest.raises(ConfigError, match=r"shards=10 over stream '_s2sink/x'.*is among"):
        Routing.build(stream="_s2sink/x", stream_column=None, shards=10)
    too_long = r"shard names up to '\.\.\./9999', which .*514 bytes.*fewer shards"
    with pytest.raises(ConfigError, match=too_long):
        Routing.build(stream="x" * 509, stream_column=None, shards=10_000)
    assert len(Routing.build(stream="x" * 509, stream_column=None, shards=100).known_streams() or []) == 100
    # Readers may read a ledger: the config takes it as a stream.
    assert S2Config(basin="some-basin", stream="_s2sink/ledger/w", access_token="t").stream


def test_the_lite_server_refuses_dot_names_like_s2(lite: LiteServer, basin: str) -> None:
    """The lite server follows s2-lite's rule on creation (common/src/stream.rs, ``validate_str``; a body's
    name is refused as ``400 bad_json``): '.', '..' and '' are refused, '...' is a name."""
    with httpx.Client(http1=False, http2=True, base_url=lite.endpoint, timeout=10.0) as http:
        for name, status in ((".", 400), ("..", 400), ("...", 201), ("", 400)):
            resp = http.post("/v1/streams", json={"stream": name}, headers={"s2-basin": basin})
            assert resp.status_code == status, (name, resp.text)
