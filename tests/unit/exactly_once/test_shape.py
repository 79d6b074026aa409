"""What a restart may change in the writer's configuration (`shape.check_restart`), as a table, and how the
configuration is described and kept in the ledger's state records (no Spark, no server)."""

from __future__ import annotations

import logging

import pytest

from s2_sink._exactly_once import shape
from s2_sink._exactly_once.ledger_records import LedgerState, encode_state, parse_record, state_of
from s2_sink._exactly_once.shape import WriteShape, check_restart, describe_encoder, shapes_of
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from s2_sink.errors import ConfigError

ENC = describe_encoder(InsertEncoder())
BASE = WriteShape(ENC, "stream=events", "fail", None)


def _with(**kw: object) -> WriteShape:
    fields = {"encoder": BASE.encoder, "routing": BASE.routing, "on_error": BASE.on_error, "dlq": BASE.dlq}
    return WriteShape(**{**fields, **kw})  # type: ignore[arg-type]


def test_the_encoder_is_described_by_its_settings_not_by_what_it_caches() -> None:
    """Two encoders with the same settings describe alike, whatever else they keep; another setting, or
    another class, differs; a long description is cut and keeps a digest of the whole."""
    cached = InsertEncoder()
    cached._frame_cache = {"schema": 1}  # type: ignore[attr-defined]
    cached.memo = object()  # type: ignore[attr-defined]
    assert describe_encoder(cached) == ENC
    assert describe_encoder(InsertEncoder(format="raw")) != ENC
    assert describe_encoder(UpsertEncoder(["id"])) != describe_encoder(UpsertEncoder(["id", "region"]))
    long_a = describe_encoder(UpsertEncoder([f"column_{i}" for i in range(100)]))
    long_b = describe_encoder(UpsertEncoder([f"column_{i}" for i in range(99)] + ["other"]))
    assert len(long_a) <= 300
    assert long_a != long_b


@pytest.mark.parametrize(
    ("new", "refused"),
    [
        (_with(on_error="skip"), None),
        (_with(on_error="dlq", dlq="dead"), None),  # a dead-letter stream added
        (_with(routing="column=region"), "routing"),
        (_with(routing="shards=4xevents"), "routing"),
        (_with(encoder=describe_encoder(InsertEncoder(format="raw"))), "encoder"),
    ],
)
def test_a_batch_in_flight_refuses_only_what_its_written_rows_cannot_survive(
    new: WriteShape, refused: str | None
) -> None:
    """With a batch in flight: a change of on_error or a dead-letter stream added goes on (listed, to log);
    a change of the routing or the encoder is refused naming it, both values, the batch and the fix. With
    nothing in flight every change goes on."""
    assert check_restart((BASE,), new, at=7, in_flight=None, writer_id="w")
    if refused is None:
        assert check_restart((BASE,), new, at=7, in_flight=7, writer_id="w")
        return
    with pytest.raises(
        ConfigError, match=rf"micro-batch 7 in flight.* under {refused}.*Restart once with {refused}"
    ):
        check_restart((BASE,), new, at=7, in_flight=7, writer_id="w")


def test_dead_letters_may_be_dropped_but_not_sent_elsewhere_while_a_batch_is_in_flight() -> None:
    """Dead letters to "dead" may stop (those written stay, one per bad row at most), but a switch to
    "dead-2" would write a second one for a bad row "dead" may hold — also when "dead" is not the latest
    configuration in flight (an epoch under on_error="skip" came between)."""
    dead = _with(on_error="dlq", dlq="dead")
    assert check_restart((dead,), _with(on_error="skip"), at=3, in_flight=3, writer_id="w")
    with pytest.raises(ConfigError, match=r"dlq_stream 'dead'.*'dead-2'"):
        check_restart((dead,), _with(on_error="dlq", dlq="dead-2"), at=3, in_flight=3, writer_id="w")
    with pytest.raises(ConfigError, match=r"dlq_stream 'dead'.*'dead-2'"):
        check_restart(
            (dead, _with(on_error="skip")),
            _with(on_error="dlq", dlq="dead-2"),
            at=3,
            in_flight=3,
            writer_id="w",
        )
    assert (
        check_restart((), _with(routing="column=x"), at=3, in_flight=3, writer_id="w") == []
    )  # recorded none


def test_the_shapes_in_flight_are_kept_in_the_state_records() -> None:
    """An intent adds its configuration to those in flight (each once), a commit keeps only its own; they
    round-trip through the record format."""
    dead = _with(on_error="dlq", dlq="dead")
    in_flight = shapes_of(shapes_of((), BASE, committed=False), dead, committed=False)
    assert in_flight == (BASE, dead)
    assert shapes_of(in_flight, BASE, committed=False) == (dead, BASE)
    assert shapes_of(in_flight, dead, committed=True) == (dead,)
    state = LedgerState(kind="intent", epoch=2, committed=4, intent=5, announces=True, shapes=in_flight)
    bodies, placed, _ = encode_state(LedgerState(), state, 0)
    doc = parse_record(bodies[-1], "ledger")
    assert state_of(doc, {}, placed.base, placed.since, "ledger").shapes == in_flight


def test_a_change_is_logged_only_once_the_restart_may_go_on(caplog: pytest.LogCaptureFixture) -> None:
    """A refused restart raises its ConfigError without first logging that it goes on; an allowed one logs
    its changes once, naming the micro-batch, unless the caller said them already (`said`)."""
    with caplog.at_level(logging.WARNING, logger=shape.__name__):
        with pytest.raises(ConfigError, match="in flight"):
            check_restart((BASE,), _with(routing="column=region"), at=5, in_flight=5, writer_id="w")
        assert not caplog.records
        changes = check_restart((BASE,), _with(on_error="skip"), at=5, in_flight=5, writer_id="w")
        check_restart((BASE,), _with(on_error="skip"), at=6, in_flight=None, writer_id="w", said=changes)
    [said] = [r.getMessage() for r in caplog.records]
    assert "goes on from its ledger at micro-batch 5" in said
    assert "(on_error 'fail' -> 'skip'); micro-batch 5 in flight is recovered" in said
