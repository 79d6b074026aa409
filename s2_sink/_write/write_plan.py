"""What an executor task is told to write: the `WritePlan`, the task's identity and the seams through
which exactly-once delivery hooks into the partition writer (each ``None``/neutral at-least-once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from s2_sink.config import S2Config

if TYPE_CHECKING:
    from collections.abc import Mapping

    from s2_sdk import Record  # annotations only: unpickling a plan need not load the SDK

__all__ = [
    "AttemptKind",
    "ChunkInfo",
    "ChunkTagger",
    "FenceKeeper",
    "OnError",
    "PartitionContext",
    "RecordFilter",
    "RecoveryHook",
    "WritePlan",
]

OnError = Literal["fail", "skip", "dlq"]


AttemptKind = Literal["task", "driver"]


@dataclass(frozen=True, slots=True)
class PartitionContext:
    """Identity of the attempt writing one partition of one micro-batch: a Spark task, or (`on_driver`) the
    driver process writing a small micro-batch itself."""

    batch_id: int
    partition_id: int
    attempt_number: int
    task_attempt_id: int
    stage_id: int
    kind: AttemptKind = "task"
    """A Spark task, or the driver's own write of a small micro-batch (`on_driver`)."""

    @classmethod
    def on_driver(cls, batch_id: int, attempt: int) -> PartitionContext:
        """The driver's `attempt`-th write of a small micro-batch (`s2_sink._write.driver.driver_write`).
        For exactly-once it is the batch's only partition, and its attempts are ordered by their number,
        as a Spark task's are by task id: each signs in, tags and fences as a task attempt does, so a failed
        attempt's successor is a retry (barrier, read back, subtract). It runs in no Spark stage."""
        return cls(batch_id, 0, attempt, attempt, -1, kind="driver")

    def describe(self) -> str:
        """Who writes, for messages: ``partition 3`` or ``the driver's write``."""
        return "the driver's write" if self.kind == "driver" else f"partition {self.partition_id}"

    def where(self, chunk: int) -> dict[str, int]:
        """Batch, partition, attempt and `chunk`, as the fault suite's crash points name a position."""
        return {
            "batch": self.batch_id,
            "partition": self.partition_id,
            "attempt": self.attempt_number,
            "chunk": chunk,
        }


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One append about to be sent: its stream, its 0-based index among this task's appends to that
    stream (deterministic, see `s2_sink._write.task.chunker`), and its size after any recovery filtering."""

    stream: str
    index: int
    record_count: int
    metered_bytes: int


class ChunkTagger(Protocol):
    """Returns the header appended (as the last header) to the first record of each append. Must
    pickle (it ships in the plan); its metered size (2 + len(name) + len(value)) must not exceed
    ``WritePlan.chunk_tag_reserve``."""

    def __call__(self, ctx: PartitionContext, chunk: ChunkInfo) -> tuple[bytes, bytes]: ...


class RecordFilter(Protocol):
    """Given one chunk's records (before tagging), returns the ones to append (e.g. minus those an
    earlier task attempt already wrote). Called on the task thread; returning ``[]`` skips the append."""

    read_ends: dict[str, int]
    """Per stream, the end of what the filter read back: the records it dropped lie before it, so the
    micro-batch's committed stream end must reach it even when this task appends nothing there."""

    def __call__(self, stream: str, records: list[Record]) -> list[Record]: ...


class FenceKeeper(Protocol):
    """Called on the event loop when an append is refused with ``412 fencing_token_mismatch``: given
    the stream and its current token, returns the token to append with from now on (the refused
    appends and everything after them are then re-sent on a fresh session: a 412 means none of them
    was applied), or raises `FencedError` when this writer must stop."""

    async def __call__(self, stream: str, current: str) -> str: ...


class RecoveryHook(Protocol):
    """Called once per task, on the task thread, before the first record is read. Returns a
    `RecordFilter`, or ``None`` when there is nothing to recover. May block on S2 reads (use
    ``s2_sink._transport.runtime.run`` and ``s2_sink._transport.runtime.get_pool().client(cfg)``)."""

    def __call__(self, plan: WritePlan, ctx: PartitionContext) -> RecordFilter | None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class WritePlan:
    """Everything an executor task needs to write its partition: plain, picklable values."""

    cfg: S2Config
    """Connection, batching and retry settings."""

    batch_id: int
    """The micro-batch being written (for errors, dead letters and result rows)."""

    stream: str | None = None
    """The target stream when rows are not routed (``stream_column`` is ``None``)."""

    stream_column: str | None = None
    """A string column of the frame holding each row's target stream; a null value is a bad row."""

    null_target: str = "the target stream is null"
    """A null ``stream_column`` value in words, naming the user's routing column or template."""

    routed_by: str = "the routing rule"
    """Where ``stream_column``'s values come from in words (``stream column 'target'``), for a value that is
    no stream name rows may go to (`s2_sink._stream_names.target_problem`): a bad row."""

    on_error: OnError = "fail"
    """What to do with a bad row (``_s2_error`` set, null or invalid stream, record over 1 MiB): raise an
    `EncodeError`, count and skip it, or append it to ``dlq_stream``."""

    dlq_stream: str | None = None
    """Dead-letter stream for ``on_error="dlq"``."""

    payload_column: str | None = None
    """Optional binary column with each bad row's original payload (the DLQ record body); when absent,
    the row's ``_s2_body`` (or an empty body) is used."""

    fencing_token: str | None = None
    """Sent with every append (exactly-once fencing); ``None`` = no fencing."""

    fence_keeper: FenceKeeper | None = None
    """What to do when ``fencing_token`` is refused; ``None`` = fail with `FencedError`."""

    stream_tokens: Mapping[str, str] = field(default_factory=dict)
    """Per stream, the token to start with instead of ``fencing_token`` (a newer generation a task
    retry of an earlier micro-batch left there; saves every task a 412 and its zombie check)."""

    chunk_tagger: ChunkTagger | None = None
    """Tags the first record of each append (exactly-once chunk tags); ``None`` = no tag."""

    chunk_tag_reserve: int = 0
    """Metered bytes kept free in every append for the tag header."""

    recovery: RecoveryHook | None = None
    """Per-task recovery hook (exactly-once task retries and replays); ``None`` = none."""

    fixed_layout: bool = False
    """The delivery mode laid the frame out and tasks check it (an exactly-once replay by record content):
    the writer must not repartition it again (``partition_by_key`` is not applied to that batch)."""

    resend_ambiguous: bool = True
    """Whether the session-level retry may re-send chunks that might already be applied (duplicates
    possible). Exactly-once sets ``False``: such failures then fail the task, and the task retry's
    recovery hook sorts out what was written."""

    streams_found: frozenset[str] = frozenset()
    """Streams the writer's previous micro-batch appended to: they exist, so tasks do not ask S2 to create
    them (``create_streams``); each worker process would otherwise ask once for every stream it had not met,
    and which worker meets which stream changes from batch to batch. One deleted since answers the task's
    append 404 and is created then (`Appender`)."""

    rows_by_stream: bool = False
    """The task's rows come ordered by target stream (the writer's split by stream sorts them when they
    outweigh what open chunks may hold: `sizing.StreamSplit`), so a stream's rows have ended once the next
    stream's begin: its chunk is then its last and goes as one unary append, not on a session."""

    latency_sample: int = 256
    """Ack latencies kept per stream and task (reservoir sample) for the p50/p99 metrics."""
