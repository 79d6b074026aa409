"""`WriteSpec`: what a write does, validated once on the driver, for both front doors.

``foreachBatch(S2Writer(...))`` builds it from keyword arguments, ``format("s2")`` from Spark options
(`s2_sink.datasource._write_options`); the rules are the same, and errors name the setting the way the
user wrote it (`KEYWORDS` or `OPTIONS`). The spec is plain picklable data; `WriteSpec.plan` turns it into
the `WritePlan` of one micro-batch, at-least-once or with the parts of an exactly-once epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from s2_sink._exactly_once.identity import validate_writer_id
from s2_sink._exactly_once.shape import WriteShape, describe_encoder
from s2_sink._stream_names import shown, target_problem
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.write_plan import OnError, WritePlan
from s2_sink.config import S2Config
from s2_sink.encoders._frame import PAYLOAD
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from s2_sink._exactly_once.epoch_plan import EpochPlan

__all__ = ["KEYWORDS", "OPTIONS", "Delivery", "Spelling", "WriteSpec"]

Delivery = Literal["exactly-once", "at-least-once"]


@dataclass(frozen=True, slots=True)
class Spelling:
    """How a front door names its settings in error messages."""

    prefix: str
    """Put before the first setting a message names (``"option "`` for Spark options)."""
    on_error: str
    dlq_stream: str
    delivery: str
    writer_id: str
    encoder: str
    routing: str


KEYWORDS: Final = Spelling(
    "",
    "on_error",
    "dlq_stream",
    "delivery",
    "writer_id",
    "encoder",
    "routing (stream_column, shards, S2Config.stream)",
)
"""`S2Writer`'s keyword arguments."""

OPTIONS: Final = Spelling(
    "option ",
    "s2.on-error",
    "s2.dlq-stream",
    "s2.delivery",
    "s2.writer-id",
    "encoding (s2.format and its options)",
    "routing (s2.stream, s2.stream-column)",
)
"""``format("s2")``'s options."""


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """A validated write: where rows go, what happens to bad rows, and the delivery guarantee.

    Build it with `WriteSpec.build`, which checks every rule; the fields are then known to be valid.
    """

    cfg: S2Config
    """Connection, batching and retry settings."""
    routing: Routing
    """Which stream each row goes to."""
    on_error: OnError = "fail"
    """Bad rows fail the batch, are skipped (counted) or go to ``dlq_stream``."""
    dlq_stream: str | None = None
    """The dead-letter stream of ``on_error="dlq"``."""
    delivery: Delivery = "at-least-once"
    writer_id: str | None = None
    """The exactly-once writer identity when given explicitly (default: the streaming query id)."""
    trust_partitioning: bool = False
    """``format("s2")`` only: a replay keeps the partitioning of the run it repairs."""
    dlq_payload: bool = False
    """Whether the record frame carries ``PAYLOAD`` (the original row as JSON) for dead letters."""
    spelling: Spelling = field(default=KEYWORDS, compare=False)
    """How the front door names the settings in messages (not part of what the write does)."""

    @classmethod
    def build(
        cls,
        cfg: S2Config,
        routing: Routing,
        *,
        on_error: str = "fail",
        dlq_stream: str | None = None,
        delivery: str = "at-least-once",
        writer_id: str | None = None,
        trust_partitioning: bool = False,
        dlq_payload: bool = False,
        spelling: Spelling = KEYWORDS,
    ) -> WriteSpec:
        """Validate the settings (ConfigError naming the setting, the bad value and the fix)."""
        s = spelling
        if on_error not in ("fail", "skip", "dlq"):
            raise ConfigError(f"{s.prefix}{s.on_error}={on_error!r} must be fail | skip | dlq")
        if on_error == "dlq" and not dlq_stream:
            raise ConfigError(f"{s.prefix}{s.on_error}=dlq needs {s.dlq_stream}, the dead-letter stream name")
        if dlq_stream is not None and on_error != "dlq":
            raise ConfigError(
                f"{s.prefix}{s.dlq_stream}={dlq_stream!r} is used only with {s.on_error}=dlq, "
                f"got {s.on_error}={on_error!r}"
            )
        if dlq_stream is not None:
            if not isinstance(dlq_stream, str):
                raise ConfigError(f"{s.prefix}{s.dlq_stream} must be a stream name, got {dlq_stream!r}")
            problem = target_problem(dlq_stream)
            if problem is not None:
                raise ConfigError(f"{s.prefix}{s.dlq_stream}={shown(dlq_stream)} {problem}")
        if delivery not in ("exactly-once", "at-least-once"):
            raise ConfigError(f"{s.prefix}{s.delivery}={delivery!r} must be exactly-once | at-least-once")
        if delivery == "exactly-once" and writer_id is not None:
            validate_writer_id(writer_id)
        return cls(
            cfg=cfg,
            routing=routing,
            on_error=on_error,  # type: ignore[arg-type]  # narrowed by the membership test above
            dlq_stream=dlq_stream,
            delivery=delivery,  # type: ignore[arg-type]  # narrowed by the membership test above
            writer_id=writer_id,
            trust_partitioning=trust_partitioning,
            dlq_payload=dlq_payload and on_error == "dlq",
            spelling=spelling,
        )

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    def shape(self, encoder: object | None) -> WriteShape:
        """What this write makes of a row with `encoder`: the settings an exactly-once ledger records and a
        restart with a batch in flight may not change (`WriteShape`). Not part of the writer's identity."""
        r = self.routing
        routing = {
            "single": f"stream={r.stream}",
            "column": f"column={r.column}",
            "template": f"template={r.template}",
            "shards": f"shards={r.shards}x{r.stream}",
        }[r.kind]
        s = self.spelling
        return WriteShape(
            describe_encoder(encoder),
            routing,
            self.on_error,
            self.dlq_stream,
            names=(s.encoder, s.routing, s.on_error, s.dlq_stream),
        )

    def static_streams(self) -> list[str]:
        """The target streams known before any row is seen (fenced up front under exactly-once)."""
        return self.routing.known_streams() or []

    def streams_to_create(self) -> list[str]:
        """Every stream known before any row is seen, the dead-letter stream included."""
        dlq = [self.dlq_stream] if self.dlq_stream is not None else []
        return self.static_streams() + dlq

    def plan(self, batch_id: int, epoch: EpochPlan | None = None) -> WritePlan:
        """The `WritePlan` of micro-batch `batch_id`: at-least-once, or exactly-once under `epoch`."""
        routed = self.routing.routed
        return WritePlan(
            cfg=self.cfg if epoch is None else epoch.cfg,
            batch_id=batch_id,
            stream=None if routed else self.routing.stream,
            stream_column=STREAM_COLUMN if routed else None,
            null_target=self.routing.null_target(),
            routed_by=self.routing.routed_by(),
            on_error=self.on_error,
            dlq_stream=self.dlq_stream,
            payload_column=PAYLOAD if self.dlq_payload else None,
            fencing_token=None if epoch is None else epoch.token,
            fence_keeper=None if epoch is None else epoch.keeper,
            stream_tokens={} if epoch is None else epoch.tokens,
            chunk_tagger=None if epoch is None else epoch.tagger,
            chunk_tag_reserve=0 if epoch is None else epoch.tag_reserve,
            recovery=None if epoch is None else epoch.dedupe,
            # A blind re-send of a possibly applied chunk could duplicate: exactly-once fails the task
            # instead, and the task retry's dedupe hook sorts out what was written.
            resend_ambiguous=epoch is None,
        )
