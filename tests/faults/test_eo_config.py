"""Exactly-once configuration rules that need no running query: speculation refused, identity required
where the query id is unavailable, writer_id validated. Spark is stood in for by a tiny object exposing
only what the checks read (``conf.get``); our own code runs for real."""

from __future__ import annotations

from typing import Any

import pytest

from s2_sink._exactly_once._identity import check_no_speculation, resolve_identity
from s2_sink.errors import ConfigError
from s2_sink.writer import S2Writer
from tests.faults._support import cfg_for


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _ConnectLikeSession:
    """Like a Spark Connect session: a conf, but no SparkContext."""

    def __init__(self, **conf: str) -> None:
        self.conf = _Conf(conf)

    @property
    def sparkContext(self) -> Any:
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")


def test_speculation_is_refused_with_a_clear_error() -> None:
    """spark.speculation=true makes exactly-once refuse to write, naming the setting and the way out."""
    with pytest.raises(ConfigError, match=r"spark\.speculation=true.*at-least-once"):
        check_no_speculation(_ConnectLikeSession(**{"spark.speculation": "true"}))
    check_no_speculation(_ConnectLikeSession(**{"spark.speculation": "false"}))
    check_no_speculation(_ConnectLikeSession())


def test_identity_without_query_id_requires_writer_id() -> None:
    """Without a reachable streaming query id (Spark Connect), exactly-once asks for writer_id; an explicit
    writer_id is used as is."""
    with pytest.raises(ConfigError, match="writer_id"):
        resolve_identity(None, _ConnectLikeSession())
    assert resolve_identity("orders-to-s2", _ConnectLikeSession()) == ("orders-to-s2", None)


def test_writer_id_is_validated_when_the_writer_is_built() -> None:
    """A writer_id that cannot be part of a stream name is a ConfigError at construction, naming it."""
    cfg = cfg_for("http://127.0.0.1:1", "t-basin-config")
    with pytest.raises(ConfigError, match="writer_id"):
        S2Writer(cfg, writer_id="has spaces and ?")
    S2Writer(cfg, writer_id="orders-v2")
    S2Writer(cfg, delivery="at-least-once")
