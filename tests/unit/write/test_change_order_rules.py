"""S2Writer's driver-side rules on upsert change order (no Spark job runs)."""

from __future__ import annotations

import pytest

from s2_sink import S2Config, S2Writer
from s2_sink.datasource._write_options import parse_write_options
from s2_sink.encoders import UpsertEncoder
from s2_sink.errors import ConfigError

CFG = S2Config(basin="change-order", stream="cdc", access_token="t")


def test_compact_without_order_by_is_refused_under_exactly_once() -> None:
    """compact=True without order_by keeps a survivor that depends on the input split, which a replay
    could change: the writer refuses it under exactly-once, naming order_by and the alternatives."""
    cfg = CFG
    compact = UpsertEncoder(["k"], compact=True)
    with pytest.raises(ConfigError, match=r"compact=True\) without order_by.*pass order_by="):
        S2Writer(cfg, compact, writer_id="w")
    S2Writer(cfg, compact, delivery="at-least-once")  # accepted: input order is what it promises
    S2Writer(cfg, UpsertEncoder(["k"], compact=True, order_by="pos"), writer_id="w")


def test_format_s2_refuses_order_by_naming_the_writer_that_supports_it() -> None:
    """format("s2") cannot repartition its input, so s2.order-by is refused, pointing at S2Writer."""
    options = {"s2.format": "upsert", "s2.key-columns": "k", "s2.order-by": "pos"}
    with pytest.raises(ConfigError, match=r"s2.order-by='pos' is not supported by format\('s2'\).*S2Writer"):
        parse_write_options(options, cfg=CFG, streaming=True)


def test_format_s2_refuses_compaction_under_exactly_once_only() -> None:
    """s2.compact=true compacts per Arrow batch (a split-dependent survivor): refused under exactly-once,
    the streaming default, and accepted at-least-once."""
    options = {"s2.format": "upsert", "s2.key-columns": "k", "s2.compact": "true"}
    with pytest.raises(ConfigError, match=r"s2.compact=true .* refused under s2.delivery=exactly-once"):
        parse_write_options(options, cfg=CFG, streaming=True)
    opts = parse_write_options({**options, "s2.delivery": "at-least-once"}, cfg=CFG, streaming=True)
    assert isinstance(opts.encoder, UpsertEncoder)
    assert opts.encoder.compact
