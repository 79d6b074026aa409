"""`WriteSpec`: one set of driver-side write rules for ``foreachBatch(S2Writer)`` and ``format("s2")``,
and the one place a micro-batch's `WritePlan` is built, at-least-once or under an exactly-once epoch."""

from __future__ import annotations

from typing import Any

import pytest

from s2_sink._exactly_once.epoch_plan import epoch_plan
from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.tags import TAG_RESERVE_BYTES
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import KEYWORDS, OPTIONS, WriteSpec
from s2_sink.config import S2Config
from s2_sink.datasource._write_options import parse_write_options
from s2_sink.encoders._frame import PAYLOAD
from s2_sink.errors import ConfigError
from s2_sink.writer import S2Writer

_CONN = {
    "s2.basin": "unused-basin",
    "s2.endpoints.account": "http://127.0.0.1:9",
    "s2.endpoints.basin": "http://127.0.0.1:9",
}
CFG = S2Config.from_options(_CONN)
SINGLE = Routing.build(stream="events", stream_column=None, shards=None)


@pytest.mark.parametrize(
    ("settings", "keyword_text", "option_text"),
    [
        (
            {"on_error": "ignore"},
            "on_error='ignore' must be fail | skip | dlq",
            "option s2.on-error='ignore'",
        ),
        ({"on_error": "dlq"}, "on_error=dlq needs dlq_stream", "option s2.on-error=dlq needs s2.dlq-stream"),
        (
            {"dlq_stream": "bad"},
            "dlq_stream='bad' is used only with on_error=dlq",
            "only with s2.on-error=dlq",
        ),
        (
            {"on_error": "dlq", "dlq_stream": "x" * 513},
            "dlq_stream='xxx",
            "option s2.dlq-stream='xxx",
        ),
        (
            {"on_error": "dlq", "dlq_stream": ".."},
            "dlq_stream='..' is not a valid S2 stream name",
            "option s2.dlq-stream='..' is not a valid S2 stream name",
        ),
        (
            {"on_error": "dlq", "dlq_stream": "_s2sink/ledger/w"},
            "dlq_stream='_s2sink/ledger/w' is among the sink's exactly-once ledgers",
            "option s2.dlq-stream='_s2sink/ledger/w' is among",
        ),
        ({"delivery": "maybe"}, "delivery='maybe' must be", "option s2.delivery='maybe' must be"),
        ({"delivery": "exactly-once", "writer_id": "has spaces"}, "writer_id must be", "writer_id must be"),
    ],
)
def test_both_front_doors_refuse_the_same_settings(
    settings: dict[str, Any], keyword_text: str, option_text: str
) -> None:
    """Every rule refuses the same values whichever front door builds the spec; the message spells the
    setting as that front door's user wrote it (keyword argument or Spark option)."""
    with pytest.raises(ConfigError) as as_keywords:
        WriteSpec.build(CFG, SINGLE, spelling=KEYWORDS, **settings)
    assert keyword_text in str(as_keywords.value)
    with pytest.raises(ConfigError) as as_options:
        WriteSpec.build(CFG, SINGLE, spelling=OPTIONS, **settings)
    assert option_text in str(as_options.value)


def test_writer_and_data_source_build_the_same_spec() -> None:
    """The same write asked for through S2Writer's arguments and through format("s2")'s options is the
    same spec (the DLQ payload column is S2Writer's frame layout, so it differs only under dlq)."""
    writer = S2Writer(
        CFG, stream_column="ev/{region}", on_error="skip", delivery="exactly-once", writer_id="w"
    )
    options = {"s2.stream-column": "ev/{region}", "s2.on-error": "skip", "s2.writer-id": "w"}
    source = parse_write_options(options, cfg=CFG, streaming=True)
    assert source.spec == writer.spec

    writer = S2Writer(CFG.replace(stream="s"), on_error="dlq", dlq_stream="dead", delivery="at-least-once")
    options = {"s2.on-error": "dlq", "s2.dlq-stream": "dead", "s2.delivery": "at-least-once"}
    source = parse_write_options(options, cfg=CFG.replace(stream="s"), streaming=True)
    assert (writer.spec.dlq_payload, source.spec.dlq_payload) == (True, False)
    assert source.spec == WriteSpec.build(
        CFG.replace(stream="s"), writer.spec.routing, on_error="dlq", dlq_stream="dead"
    )


def test_at_least_once_plan() -> None:
    """Without an epoch the plan has no fencing, tags or recovery, may re-send ambiguous chunks, and names
    the single stream, or the routing column when rows carry their own target."""
    plan = WriteSpec.build(CFG, SINGLE).plan(7)
    assert (plan.batch_id, plan.stream, plan.stream_column, plan.cfg) == (7, "events", None, CFG)
    assert (plan.fencing_token, plan.fence_keeper, plan.chunk_tagger, plan.recovery) == (None,) * 4
    assert (plan.chunk_tag_reserve, plan.resend_ambiguous, plan.payload_column) == (0, True, None)

    routed = Routing.build(stream=None, stream_column="target", shards=None)
    spec = WriteSpec.build(CFG, routed, on_error="dlq", dlq_stream="dead", dlq_payload=True)
    plan = spec.plan(0)
    assert (plan.stream, plan.stream_column) == (None, STREAM_COLUMN)
    assert (plan.on_error, plan.dlq_stream, plan.payload_column) == ("dlq", "dead", PAYLOAD)


def test_exactly_once_plan_is_bound_to_one_epoch_and_one_config() -> None:
    """Under an epoch the plan carries that epoch's token, tagger, token keeper and dedupe hook, all on
    one config whose append retries are NO_SIDE_EFFECTS; ambiguous chunks are not re-sent blindly."""
    epoch = epoch_plan(CFG, writer_hash("w"), 4, {"events": 12}, recovery=True, writer_id="w")
    plan = WriteSpec.build(CFG, SINGLE, delivery="exactly-once").plan(3, epoch)
    assert Token.parse(plan.fencing_token or "") == Token(epoch=4, gen=0, writer=writer_hash("w"))
    assert plan.cfg == CFG.replace(append_retry_policy="NO_SIDE_EFFECTS")
    hooks = (plan.fence_keeper, plan.chunk_tagger, plan.recovery)
    assert hooks == (epoch.keeper, epoch.tagger, epoch.dedupe)
    assert all(getattr(hook, "__self__", None) is epoch for hook in hooks)
    assert (epoch.cfg, epoch.token) == (plan.cfg, plan.fencing_token)
    assert (epoch.starts.inline, epoch.recovery, epoch.replay) == ({"events": 12}, True, "content")
    assert (plan.chunk_tag_reserve, plan.resend_ambiguous) == (TAG_RESERVE_BYTES, False)
