"""Writer options of ``format("s2")``: the encoder, and the `WriteSpec` both front doors share.

Parsed on the driver (connection options are ``S2Config.from_options``'); the rules are `WriteSpec.build`'s,
and what is checked here is particular to options: one that does not apply to this write is refused."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from s2_sink._option_map import OptionMap, parse_bool
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import OPTIONS, WriteSpec
from s2_sink.config import S2Config
from s2_sink.datasource import _write_keys as K
from s2_sink.datasource._write_keys import WRITE_KEYS
from s2_sink.encoders import Encoder, InsertEncoder, KafkaEncoder, UpsertEncoder
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from s2_sink._write.frame_encoding import FrameEncoding

__all__ = ["WRITE_KEYS", "WriteOptions", "parse_write_options"]

_UPSERT_ONLY = (K.OPT_KEY_COLUMNS, K.OPT_OP_COLUMN, K.OPT_COMPACT)
_NOT_UPSERT = f"applies to {K.OPT_FORMAT}=upsert, not {{fmt!r}}"
# Per s2.format: the options that do not apply to it, and why (``{fmt}`` is the format given).
_REFUSED: Final[dict[str, tuple[tuple[str, ...], str]]] = {
    "json": (_UPSERT_ONLY, _NOT_UPSERT),
    "raw": (_UPSERT_ONLY, _NOT_UPSERT),
    "kafka": (
        (*_UPSERT_ONLY, K.OPT_EXCLUDE_COLUMNS),
        f"does not apply to {K.OPT_FORMAT}=kafka (only value is written)",
    ),
    "upsert": (
        (K.OPT_KEY_COLUMN, K.OPT_VALUE_COLUMN),
        f"applies to {K.OPT_FORMAT}=json|raw|kafka; upsert keys are {K.OPT_KEY_COLUMNS}",
    ),
}


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Validated writer options (plain data; pickles to executors)."""

    encoder: Encoder
    spec: WriteSpec

    def encoding(self, schema: StructType) -> FrameEncoding:
        from s2_sink._write.frame_encoding import FrameEncoding  # noqa: PLC0415 - the task side only

        return FrameEncoding(self.encoder, schema, self.spec.routing, payload=self.spec.dlq_payload)


def _get(options: OptionMap, name: str) -> str | None:
    value = options.text(name)  # case-insensitive, as Spark's option names (s2_sink._option_map)
    return None if value is None else value.strip()


def _names(option: str, raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"option {option}={raw!r} names no column")
    return names


def _encoder(options: OptionMap) -> Encoder:
    fmt_raw = _get(options, K.OPT_FORMAT)
    fmt = (fmt_raw or "json").lower()
    headers = _get(options, K.OPT_HEADERS_COLUMN) or None
    timestamp = _get(options, K.OPT_TIMESTAMP_COLUMN) or None
    exclude_raw = _get(options, K.OPT_EXCLUDE_COLUMNS)
    exclude = _names(K.OPT_EXCLUDE_COLUMNS, exclude_raw) if exclude_raw is not None else []
    if fmt not in _REFUSED:
        raise ConfigError(f"option {K.OPT_FORMAT}={fmt_raw!r} must be one of json | raw | upsert | kafka")
    refused, why = _REFUSED[fmt]
    for name in refused:
        if _get(options, name) is not None:
            raise ConfigError(f"option {name} {why.format(fmt=fmt)}")
    if fmt in ("json", "raw"):
        key_raw = _get(options, K.OPT_KEY_COLUMN)
        if key_raw is not None:
            # A record key only routes S2Writer's shards and partition_by_key: here it would do nothing.
            raise ConfigError(
                f"option {K.OPT_KEY_COLUMN}={key_raw!r} has no effect on format('s2') writes (a record key "
                "only picks S2Writer's shard and partition_by_key order): drop it, keep the key in the "
                "body, or write with S2Writer(cfg, InsertEncoder(key_column=...), shards=N)"
            )
        return InsertEncoder(
            fmt,  # type: ignore[arg-type]  # narrowed by the membership test above
            headers_column=headers,
            timestamp_column=timestamp,
            value_column=_get(options, K.OPT_VALUE_COLUMN) or "value",
            exclude_columns=exclude,
        )
    if fmt == "kafka":
        return KafkaEncoder(
            value_column=_get(options, K.OPT_VALUE_COLUMN) or "value",
            key_column=_get(options, K.OPT_KEY_COLUMN) or None,
            headers_column=headers,
            timestamp_column=timestamp,
        )
    keys_raw = _get(options, K.OPT_KEY_COLUMNS)
    if keys_raw is None:
        raise ConfigError(f"{K.OPT_FORMAT}=upsert needs {K.OPT_KEY_COLUMNS}, e.g. 'id' or 'tenant,id'")
    return UpsertEncoder(
        _names(K.OPT_KEY_COLUMNS, keys_raw),
        op_column=_get(options, K.OPT_OP_COLUMN) or None,
        compact=parse_bool(K.OPT_COMPACT, _get(options, K.OPT_COMPACT) or "false"),
        headers_column=headers,
        timestamp_column=timestamp,
        exclude_columns=exclude,
    )


def _refuse_change_order(options: OptionMap, encoder: Encoder, delivery: str) -> None:
    """A data source write cannot repartition its input, so it can promise neither a change order across
    tasks nor a split-independent compaction."""
    order_by = _get(options, K.OPT_ORDER_BY)
    if order_by is not None:
        raise ConfigError(
            f"option {K.OPT_ORDER_BY}={order_by!r} is not supported by format('s2'): a data source write "
            "cannot repartition the DataFrame, so changes of one key in several partitions would be "
            "written by several tasks at once. Write with foreachBatch(S2Writer(cfg, "
            f"UpsertEncoder(keys, order_by={order_by!r}))), which lays each key out in one task in that order"
        )
    if delivery == "exactly-once" and getattr(encoder, "compact", False):
        raise ConfigError(
            f"option {K.OPT_COMPACT}=true keeps the last change per key within each Arrow batch of a task, "
            "so the survivor depends on how Spark split the micro-batch and a replay could keep another one: "
            f"it is refused under {K.OPT_DELIVERY}=exactly-once. Set {K.OPT_DELIVERY}=at-least-once, or "
            "write with foreachBatch(S2Writer(cfg, UpsertEncoder(keys, compact=True, order_by=...)))"
        )


# S2Config options that shape how `S2Writer` lays out a micro-batch: refused by format("s2") writes.
FOREACH_BATCH_ONLY: Final = (
    "sink.write-parallelism",
    "sink.driver-write.max-rows",
    "sink.driver-write.max-bytes",
)


def parse_write_options(options: Mapping[str, str], *, cfg: S2Config, streaming: bool) -> WriteOptions:
    options = OptionMap(options)
    for key in FOREACH_BATCH_ONLY:
        if key in options:  # a Python data source cannot repartition its input nor write from the driver
            raise ConfigError(
                f"option {options.spelling(key)}={options[key]!r} applies to foreachBatch(S2Writer(...)) "
                "only: a format('s2') write keeps Spark's partitioning, one task per partition. Drop the "
                "option, and narrow the frame with df.coalesce(n) before writeStream instead"
            )
    encoder = _encoder(options)
    stream_column = _get(options, K.OPT_STREAM_COLUMN) or None
    # S2Writer lets stream_column override the config's stream; options name one or the other.
    if stream_column is not None and cfg.stream is not None:
        raise ConfigError(
            f"options s2.stream={cfg.stream!r} and {K.OPT_STREAM_COLUMN}={stream_column!r} "
            "are mutually exclusive"
        )
    routing = Routing.build(stream=cfg.stream, stream_column=stream_column, shards=None)
    delivery_raw = _get(options, K.OPT_DELIVERY)
    delivery = (delivery_raw or ("exactly-once" if streaming else "at-least-once")).lower()
    if delivery == "exactly-once" and not streaming:
        raise ConfigError(
            f"option {K.OPT_DELIVERY}=exactly-once applies to df.writeStream.format('s2'): a one-off "
            "df.write has no micro-batch id to record, so its writes are at-least-once (drop the option)"
        )
    _refuse_change_order(options, encoder, delivery)
    writer_id = _get(options, K.OPT_WRITER_ID) or None
    replay_raw = _get(options, K.OPT_REPLAY_PARTITIONING)
    replay = (replay_raw or "check").lower()
    if replay not in ("check", "same"):
        raise ConfigError(f"option {K.OPT_REPLAY_PARTITIONING}={replay_raw!r} must be check | same")
    for name, raw in ((K.OPT_WRITER_ID, writer_id), (K.OPT_REPLAY_PARTITIONING, replay_raw)):
        if raw is not None and delivery == "at-least-once":  # neither is reported by WriteSpec.build
            raise ConfigError(f"option {name}={raw!r} is used only with {K.OPT_DELIVERY}=exactly-once")
    spec = WriteSpec.build(
        cfg,
        routing,
        on_error=(_get(options, K.OPT_ON_ERROR) or "fail").lower(),
        dlq_stream=_get(options, K.OPT_DLQ_STREAM) or None,
        delivery=delivery,
        writer_id=writer_id,
        trust_partitioning=replay == "same",
        spelling=OPTIONS,
    )
    return WriteOptions(encoder=encoder, spec=spec)
