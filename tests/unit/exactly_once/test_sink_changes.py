"""``df.writeStream.format("s2")`` when its options change between runs, against the lite server (no Spark):
the execution the driver plans (`open_sink_run`) records what the options make of a row, and a batch in
flight refuses a change it cannot survive, naming the option; a new ``s2.writer-id`` on a checkpoint whose
query wrote under another is refused, naming the one to write as; any change goes on once the batch
committed."""

from __future__ import annotations

import pytest

from s2_sink._exactly_once import sink_run as _sink_run
from s2_sink._exactly_once.sink_run import commit_sink_run, open_sink_run
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import OPTIONS, WriteSpec
from s2_sink.config import S2Config
from s2_sink.encoders import InsertEncoder
from s2_sink.errors import ConfigError, WriterConflictError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin


def _shape(cfg: S2Config, *, column: str | None = None, raw: bool = False) -> object:
    routing = Routing.build(stream=None if column else cfg.stream, stream_column=column, shards=None)
    encoder = InsertEncoder(format="raw" if raw else "json")
    return WriteSpec.build(cfg, routing, delivery="exactly-once", spelling=OPTIONS).shape(encoder)


def test_a_batch_in_flight_refuses_other_options_and_a_new_writer_id(lite: LiteServer) -> None:
    """Batch 0 is announced (its execution opened, its tasks may have written) when the query restarts with
    a stream column instead of one stream: refused on the driver naming the option, the old and new routing
    and the fix; so is another encoding. The old options finish the batch; then the change goes on. A new
    s2.writer-id on the same checkpoint is refused naming the id the query wrote under (before: a new,
    empty ledger that would write the batch in flight or committed again)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    _sink_run._planned.clear()
    open_sink_run(cfg, "q1", "q1", ["events"], shape=_shape(cfg))  # batch 0 in flight; the driver dies
    _sink_run._planned.clear()  # a restart: a new process
    with pytest.raises(ConfigError) as refused:
        open_sink_run(cfg, "q1", "q1", [], shape=_shape(cfg, column="region"))
    message = str(refused.value)
    assert "routing (s2.stream, s2.stream-column) 'stream=events'" in message
    assert "'column=region'" in message
    assert "micro-batch 0 in flight" in message
    assert "Restart once with" in message
    with pytest.raises(ConfigError, match=r"encoding \(s2\.format and its options\)"):
        open_sink_run(cfg, "q1", "q1", ["events"], shape=_shape(cfg, raw=True))
    with pytest.raises(
        WriterConflictError, match=r"wrote its micro-batches as writer_id 'q1'.*Write as 'q1'"
    ):
        open_sink_run(cfg, "orders", "q1", ["events"], shape=_shape(cfg))

    again = open_sink_run(cfg, "q1", "q1", ["events"], shape=_shape(cfg))
    commit_sink_run(cfg, "q1", again, 0, {"events": 1}, query_id="q1", shape=_shape(cfg))
    _sink_run._planned.clear()
    changed = open_sink_run(cfg, "q1", "q1", [], shape=_shape(cfg, column="region"))
    assert not changed.recovery
