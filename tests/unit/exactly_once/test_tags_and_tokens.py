"""Exactly-once building blocks that need no server: chunk tags, fingerprints, fencing tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from s2_sink._exactly_once.fencing import MAX_TOKEN_BYTES, Token, judge_current_token, writer_hash
from s2_sink._exactly_once.readback import fingerprint
from s2_sink._exactly_once.tags import TAG_HEADER, TAG_RESERVE_BYTES, ChunkTag, find_tag, strip_tag
from s2_sink.errors import FencedError

_u32 = st.integers(min_value=0, max_value=2**32)


@given(_u32, _u32, _u32, _u32, _u32, st.integers(min_value=1, max_value=1000))
def test_chunk_tag_round_trips_and_fits_its_reserve(  # noqa: PLR0917 - hypothesis arguments
    epoch: int, batch: int, part: int, att: int, chunk: int, n: int
) -> None:
    """A chunk tag decodes to what was encoded, and its metered size stays within TAG_RESERVE_BYTES."""
    tag = ChunkTag("0123abcd", epoch, batch, part, att, chunk, n)
    name, value = tag.encode()
    assert name == TAG_HEADER
    assert ChunkTag.decode(value) == tag
    assert 2 + len(name) + len(value) <= TAG_RESERVE_BYTES


def test_find_tag_ignores_foreign_or_malformed_headers() -> None:
    """find_tag returns None for records without a well-formed tag; strip_tag removes only tags."""
    tag = ChunkTag("0123abcd", 1, 2, 3, 0, 4, 5)
    headers = [(b"@key", b"k"), tag.encode(), (b"@action", b"u")]
    assert find_tag(headers) == tag
    assert find_tag([(b"@key", b"k")]) is None
    assert find_tag([(TAG_HEADER, b"2 nonsense")]) is None
    assert find_tag([(TAG_HEADER, b"1 0123abcd 1 2 3 0 4 0")]) is None  # a chunk has >= 1 record
    assert strip_tag(headers) == [(b"@key", b"k"), (b"@action", b"u")]


def test_fingerprint_ignores_the_tag_but_not_content() -> None:
    """The fingerprint is the same with or without the chunk tag and differs for any content change."""
    tag = ChunkTag("0123abcd", 1, 2, 3, 0, 4, 5).encode()
    base = fingerprint("s", [(b"a", b"1")], b"body")
    assert fingerprint("s", [tag, (b"a", b"1")], b"body") == base
    assert fingerprint("t", [(b"a", b"1")], b"body") != base
    assert fingerprint("s", [(b"a", b"2")], b"body") != base
    assert fingerprint("s", [(b"a", b"1")], b"bodx") != base
    assert fingerprint("s", None, b"body") != base
    # Field boundaries cannot be forged by moving bytes between header name and value.
    assert fingerprint("s", [(b"ab", b"")], b"") != fingerprint("s", [(b"a", b"b")], b"")


def test_token_format_parse_and_length() -> None:
    """Tokens read s2sink:<hash8>:<epoch>.<gen>~ in base 36, parse back, order by (epoch, gen), fit 36
    bytes; an earlier version's decimal token (no ``~``) still parses to the same token."""
    w = writer_hash("query-1")
    tok = Token(epoch=12, gen=3, writer=w)
    assert str(tok) == f"s2sink:{w}:c.3~"
    assert Token.parse(str(tok)) == tok
    assert Token.parse(f"s2sink:{w}:12.3") == tok
    assert Token.parse(f"s2sink:{w}:10.0") < Token.parse(str(Token(epoch=11, gen=0, writer=w)))
    assert Token.parse("someone-else") is None
    assert Token.parse("") is None
    assert Token(epoch=2, gen=0, writer=w) > Token(epoch=1, gen=9, writer=w)
    assert len(Token(epoch=10**8, gen=10**9, writer=w).encode()) <= MAX_TOKEN_BYTES
    with pytest.raises(ValueError, match="36 bytes"):
        Token(epoch=10**25, gen=10**9, writer=w).encode()


def test_judge_current_token_rules() -> None:
    """Empty or older-run tokens may be fenced over; same-run newer generations are adopted;
    a newer run or (by default) another writer's token is a FencedError naming the stream."""
    w = writer_hash("q")
    mine = Token(epoch=5, gen=0, writer=w)
    assert judge_current_token("s", "", mine) is None
    assert judge_current_token("s", str(Token(4, 7, w)), mine) is None
    assert judge_current_token("s", str(Token(5, 2, w)), mine) == Token(5, 2, w)
    with pytest.raises(FencedError, match="newer run"):
        judge_current_token("s", str(Token(6, 0, w)), mine)
    with pytest.raises(FencedError, match=r"'s'.*not this writer"):
        judge_current_token("s", str(Token(1, 0, writer_hash("other"))), mine)
    with pytest.raises(FencedError, match="not this writer"):
        judge_current_token("s", "user-token", mine)


def test_judge_takes_over_a_foreign_s2sink_token_only_on_streams_it_never_wrote() -> None:
    """A writer that never committed to a stream may take it over from another s2_sink writer (e.g. the
    same pipeline after its checkpoint was deleted); a stream it did write to, or a non-s2_sink token,
    stays a FencedError (a displaced writer must not fight back)."""
    mine = Token(epoch=1, gen=0, writer=writer_hash("new"))
    old = str(Token(epoch=7, gen=2, writer=writer_hash("old")))
    assert judge_current_token("s", old, mine, may_take_over=True) is None
    with pytest.raises(FencedError):
        judge_current_token("s", old, mine, may_take_over=False)
    with pytest.raises(FencedError):
        judge_current_token("s", "user-token", mine, may_take_over=True)


def test_fingerprint_leaves_out_a_dead_letters_partition_but_not_its_row_hash() -> None:
    base = [(b"s2sink-error", b"bad"), (b"s2sink-batch-id", b"3")]
    p0 = fingerprint("dlq", [*base, (b"s2sink-partition", b"0")], b"x")
    p5 = fingerprint("dlq", [*base, (b"s2sink-partition", b"5")], b"x")
    assert p0 == p5
    # Without s2sink-error it is not a dead letter, and the header is the user's content.
    assert fingerprint("s", [(b"s2sink-partition", b"0")], b"x") != fingerprint(
        "s", [(b"s2sink-partition", b"5")], b"x"
    )
    assert fingerprint("dlq", [*base, (b"s2sink-row-hash", b"01")], b"x") != fingerprint(
        "dlq", [*base, (b"s2sink-row-hash", b"02")], b"x"
    )


@given(
    epoch=st.integers(0, 1_600_000),
    gen=st.integers(0, 1295),
    partition=st.integers(0, 46_655),
    task_id=st.integers(0, 2**31),
)
def test_bump_tokens_round_trip_within_36_bytes(epoch: int, gen: int, partition: int, task_id: int) -> None:
    from s2_sink._exactly_once.fencing import TaskAttempt

    token = Token(epoch, gen + 1, "0123abcd", by=TaskAttempt(partition, task_id))
    assert len(token.encode()) <= MAX_TOKEN_BYTES
    back = Token.parse(token.encode())
    assert back == token
    assert back is not None
    assert back.by == TaskAttempt(partition, task_id)
    assert TaskAttempt(partition, task_id).superseded_by(TaskAttempt(partition, task_id + 1))
    assert not TaskAttempt(partition, task_id + 1).superseded_by(TaskAttempt(partition, task_id))
    assert not TaskAttempt(partition, task_id).superseded_by(TaskAttempt(partition + 1, task_id + 1))
