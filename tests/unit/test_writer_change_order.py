"""S2Writer's driver-side rules on upsert change order (no Spark job runs)."""

from __future__ import annotations

import pytest

from s2_sink import S2Config, S2Writer
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
