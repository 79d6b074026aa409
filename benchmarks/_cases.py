"""The measured cases. Each one prepares its sink (untimed) and returns the timed action.

A case whose feature is not in the package yet raises `NotAvailable` with the reason; the harness prints it
instead of a number.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchmarks import _s2
from benchmarks._data import json_body

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CASES", "Case", "Ctx", "NotAvailable", "Prepared"]


class NotAvailable(Exception):
    """The feature a case measures is not in the package (yet)."""


@dataclass
class Ctx:
    """What every case gets: the session, the cached data and where the lite server listens."""

    spark: SparkSession
    df: DataFrame
    rows: int
    endpoint: str
    basin: str
    tmp: str


@dataclass
class Prepared:
    """A ready case: `action()` is timed; afterwards the harness reads back `streams` (or those under
    `stream_prefix`) and checks they hold `rows` records (at least `rows` for at-least-once)."""

    action: Callable[[], None]
    streams: list[str] = field(default_factory=list)
    stream_prefix: str | None = None
    at_least_once: bool = False
    note: str = ""
    cleanup: Callable[[], None] | None = None


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    prepare: Callable[[Ctx], Prepared]


def _stream(key: str) -> str:
    return f"{key}-{uuid.uuid4().hex[:8]}"


# -- s2_sink adapters: NotAvailable (never a fake number) until the feature lands --


def _encoder(kind: str) -> Any:
    try:
        from s2_sink import encoders
    except ImportError as exc:
        raise NotAvailable(f"s2_sink.encoders not available ({exc})") from exc
    if kind == "insert":
        cls = getattr(encoders, "InsertEncoder", None)
        if cls is None:
            raise NotAvailable("s2_sink.encoders.InsertEncoder not available")
        return cls()
    cls = getattr(encoders, "UpsertEncoder", None)
    if cls is None:
        raise NotAvailable("s2_sink.encoders.UpsertEncoder not available")
    if kind == "upsert-ordered":  # ids are unique: every row is written, after Spark's sort and compaction
        return cls(["id"], order_by="ts", compact=True)
    return cls(["id"])


def _config(ctx: Ctx, stream: str | None, **extra: Any) -> Any:
    try:
        from s2_sink.config import S2Config
    except ImportError as exc:
        raise NotAvailable(f"s2_sink.config.S2Config not available ({exc})") from exc
    return S2Config(
        basin=ctx.basin,
        stream=stream,
        account_endpoint=ctx.endpoint,
        basin_endpoint=ctx.endpoint,
        create_streams=True,
        **extra,
    )


def _writer(ctx: Ctx, stream: str, encoder: Any, delivery: str, **cfg_extra: Any) -> Any:
    try:
        from s2_sink.writer import S2Writer
    except ImportError as exc:
        raise NotAvailable(f"s2_sink.writer.S2Writer not available ({exc})") from exc
    cfg = _config(ctx, stream, **cfg_extra)
    kwargs: dict[str, Any] = {"encoder": encoder, "delivery": delivery}
    if delivery == "exactly-once":
        kwargs["writer_id"] = f"bench-{uuid.uuid4().hex[:12]}"
    try:
        return S2Writer(cfg, **kwargs)
    except TypeError as exc:
        raise NotAvailable(f"S2Writer does not take {sorted(kwargs)} yet ({exc})") from exc
    except Exception as exc:
        # The writer says so itself when a delivery mode is not built yet; anything else is a real error.
        if "not available" in str(exc):
            raise NotAvailable(str(exc)) from exc
        raise


# -- the cases --


def _noop(ctx: Ctx) -> Prepared:
    frame = json_body(ctx.df)
    return Prepared(
        action=lambda: frame.write.format("noop").mode("overwrite").save(),
        note="projection: to_json(struct(*))",
    )


def _json_files(ctx: Ctx) -> Prepared:
    path = tempfile.mkdtemp(prefix="json-", dir=ctx.tmp)
    return Prepared(
        action=lambda: ctx.df.write.mode("overwrite").json(path),
        cleanup=lambda: shutil.rmtree(path, ignore_errors=True),
    )


def _naive(ctx: Ctx) -> Prepared:
    stream = _stream("naive")
    _s2.ensure(ctx.endpoint, ctx.basin, [stream])
    sink = _s2.naive_foreach_batch(ctx.endpoint, ctx.basin, stream)
    frame = json_body(ctx.df)
    return Prepared(action=lambda: sink(frame, 0), streams=[stream])


def _producer(ctx: Ctx) -> Prepared:
    stream = _stream("producer")
    _s2.ensure(ctx.endpoint, ctx.basin, [stream])
    fn = _s2.producer_per_partition(ctx.endpoint, ctx.basin, stream)
    frame = json_body(ctx.df)

    def action() -> None:
        frame.mapInArrow(fn, "n long").groupBy().sum("n").collect()

    return Prepared(action=action, streams=[stream])


def _s2writer(delivery: str, encoder_kind: str) -> Callable[[Ctx], Prepared]:
    def prepare(ctx: Ctx) -> Prepared:
        stream = _stream(f"w-{encoder_kind}-{delivery[:5]}")
        writer = _writer(ctx, stream, _encoder(encoder_kind), delivery)
        return Prepared(
            action=lambda: writer(ctx.df, 0), streams=[stream], at_least_once=delivery != "exactly-once"
        )

    return prepare


def _datasource(ctx: Ctx) -> Prepared:
    try:
        from s2_sink import datasource
    except ImportError as exc:
        raise NotAvailable(f"s2_sink.datasource not available ({exc})") from exc
    cls = getattr(datasource, "S2DataSource", None)
    if cls is None:
        raise NotAvailable("s2_sink.datasource.S2DataSource not available")
    if "writer" not in vars(cls):
        raise NotAvailable("S2DataSource has no writer yet (format('s2') reads only)")
    ctx.spark.dataSource.register(cls)
    stream = _stream("ds")
    writer = (
        ctx.df.write.format("s2")
        .mode("append")
        .option("s2.basin", ctx.basin)
        .option("s2.stream", stream)
        .option("s2.endpoints.account", ctx.endpoint)
        .option("s2.endpoints.basin", ctx.endpoint)
        .option("s2.create-streams", "true")
    )
    return Prepared(action=writer.save, streams=[stream], at_least_once=True)


def _read_json(ctx: Ctx) -> Prepared:
    """``spark.read.json`` of the rows as local JSON files (written untimed), decoded into their schema."""
    path = tempfile.mkdtemp(prefix="read-json-", dir=ctx.tmp)
    ctx.df.write.mode("overwrite").json(path)
    schema = ctx.df.schema
    return Prepared(
        action=lambda: ctx.spark.read.schema(schema).json(path).write.format("noop").mode("overwrite").save(),
        cleanup=lambda: shutil.rmtree(path, ignore_errors=True),
        note="schema given (no inference pass); noop sink",
    )


def _read_s2(ctx: Ctx) -> Prepared:
    """``spark.read.format("s2")`` of the same rows as JSON records (written untimed by S2Writer),
    decoded into the same schema."""
    try:
        from s2_sink import datasource
    except ImportError as exc:
        raise NotAvailable(f"s2_sink.datasource not available ({exc})") from exc
    ctx.spark.dataSource.register(datasource.S2DataSource)
    stream = _stream("read")
    _writer(ctx, stream, _encoder("insert"), "at-least-once")(ctx.df, 0)
    reader = (
        ctx.spark.read.format("s2")
        .option("s2.basin", ctx.basin)
        .option("s2.stream", stream)
        .option("s2.endpoints.account", ctx.endpoint)
        .option("s2.endpoints.basin", ctx.endpoint)
        .option("s2.format", "json")
        # One read task per input partition, as spark.read.json splits its files across the cores.
        .option("s2.records-per-partition", str(-(-ctx.rows // ctx.df.rdd.getNumPartitions())))
        .schema(ctx.df.schema)
    )
    return Prepared(
        action=lambda: reader.load().write.format("noop").mode("overwrite").save(),
        streams=[stream],
        note="s2.format=json, schema given, s2.records-per-partition = rows / partitions; noop sink",
    )


CASES: tuple[Case, ...] = (
    Case("noop", "Spark noop sink (encoding projection)", _noop),
    Case("json", "Spark df.write.json (local files)", _json_files),
    Case("naive", "naive foreachBatch: collect + unary appends", _naive),
    Case("producer", "per-partition SDK Producer, submit per row", _producer),
    Case("s2writer", "S2Writer at-least-once", _s2writer("at-least-once", "insert")),
    Case("s2writer_eo", "S2Writer exactly-once", _s2writer("exactly-once", "insert")),
    Case("s2writer_upsert", "S2Writer + UpsertEncoder", _s2writer("at-least-once", "upsert")),
    Case(
        "s2writer_upsert_ordered",
        "S2Writer + UpsertEncoder(order_by, compact)",
        _s2writer("at-least-once", "upsert-ordered"),
    ),
    Case("datasource", 'format("s2") writer', _datasource),
    Case("read_json", "spark.read.json (local files)", _read_json),
    Case("read_s2", 'spark.read.format("s2")', _read_s2),
)
