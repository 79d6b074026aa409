"""Which stream each row goes to: one stream, a column, a template over columns, or key-hash shards.

Each rule has two twins that must agree row for row: `Routing.expr`, the Spark expression `S2Writer`
adds to the rows it ships to its tasks for column and template rules (Spark's cast of any column type to
text), and `Routing.arrow_targets`, the same rule over an Arrow batch: ``format("s2")``'s column and
template rules, and every writer's shards, which hash the encoded record in the task.
A null target (a null routing column) is a bad row, handled by ``on_error``; so is a target that is no
stream rows may go to (`s2_sink._stream_names.target_problem`), checked where both twins' targets meet, on
the task (`FrameInput`). Shard names are configuration, checked here on the driver.

Shards use Spark's ``xxhash64`` of the record key (``_s2_key``; the body when the key is null), the XXH64
of its bytes with seed 42, stable across Spark versions and runs, so a key always lands on the same shard
``<stream>/<n>``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Final, Literal

import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, IntegralType, StringType, StructType

from s2_sink._stream_names import shown, target_problem
from s2_sink.encoders._change_order import col as column_named
from s2_sink.encoders._frame import BODY, KEY, STREAM
from s2_sink.errors import ConfigError

__all__ = ["STREAM_COLUMN", "Routing"]

STREAM_COLUMN: Final = STREAM

_MAX_SHARDS: Final = 100_000
_SPARK_SEED: Final = 42


@dataclass(frozen=True, slots=True)
class Routing:
    """A validated routing rule. Build it with `Routing.build`."""

    kind: Literal["single", "column", "template", "shards"]
    stream: str | None = None
    column: str | None = None
    template: str | None = None
    shards: int | None = None

    @classmethod
    def build(cls, *, stream: str | None, stream_column: str | None, shards: int | None) -> Routing:
        """From the writer's arguments: `stream` is the config's stream; `stream_column` a column name or a
        template containing ``{column}`` placeholders; `shards` a shard count over `stream`."""
        if stream_column is not None and shards is not None:
            raise ConfigError(
                f"stream_column ({stream_column!r}) and shards ({shards!r}) are mutually exclusive"
            )
        if shards is not None:
            if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= _MAX_SHARDS:
                raise ConfigError(f"shards must be an integer between 1 and {_MAX_SHARDS}, got {shards!r}")
            if stream is None:
                raise ConfigError(
                    "shards needs a stream prefix: set S2Config.stream (s2.stream), e.g. 'events'"
                )
            last = f"{stream}/{shards - 1}"  # the longest shard name; all share the prefix
            problem = target_problem(last)
            if problem is not None:
                raise ConfigError(
                    f"shards={shards} over stream {shown(stream)} (s2.stream) makes shard names up to "
                    f"'.../{shards - 1}', which {problem}: choose a shorter stream or fewer shards"
                )
            return cls("shards", stream=stream, shards=shards)
        if stream_column is not None:
            if not isinstance(stream_column, str) or not stream_column:
                raise ConfigError(f"stream_column must be a column name or a template, got {stream_column!r}")
            if "{" in stream_column or "}" in stream_column:
                fields = _template_fields(stream_column)
                if not fields:
                    raise ConfigError(f"stream template {stream_column!r} names no column")
                return cls("template", template=stream_column)
            return cls("column", column=stream_column)
        if stream is None:
            raise ConfigError("no target stream: set S2Config.stream (s2.stream), stream_column or shards")
        problem = target_problem(stream)
        if problem is not None:
            raise ConfigError(f"the target stream {shown(stream)} (S2Config.stream, s2.stream) {problem}")
        return cls("single", stream=stream)

    @property
    def routed(self) -> bool:
        """Whether each row carries its own target (`STREAM_COLUMN`)."""
        return self.kind != "single"

    def source_columns(self) -> list[str]:
        """Input columns the rule reads (kept through the encoder's projection)."""
        if self.kind == "column":
            assert self.column is not None
            return [self.column]
        if self.kind == "template":
            assert self.template is not None
            return _template_fields(self.template)
        return []

    def null_target(self) -> str:
        """How a row whose target is null reads in a bad-row error: the user's column or template, not the
        internal `STREAM_COLUMN` the target is carried in."""
        if self.kind == "column":
            return f"stream column {self.column!r} is null (the row has no target stream)"
        if self.kind == "template":
            assert self.template is not None
            columns = ", ".join(repr(c) for c in _template_fields(self.template))
            return f"stream template {self.template!r} has a null column (one of {columns})"
        return "the target stream is null"

    def routed_by(self) -> str:
        """Where a routed row's target comes from, in the user's words (for a bad target's error)."""
        if self.kind == "column":
            return f"stream column {self.column!r}"
        if self.kind == "template":
            return f"stream template {self.template!r}"
        return f"shards of stream {self.stream!r}" if self.kind == "shards" else f"stream {self.stream!r}"

    def body_exclusions(self) -> list[str]:
        """Input columns that must not be part of the record body (a dedicated stream-name column)."""
        return [self.column] if self.kind == "column" and self.column is not None else []

    def validate(self, schema: StructType) -> None:
        """Check on the driver that the columns the rule reads exist."""
        names = set(schema.fieldNames())
        for col in self.source_columns():
            if col not in names:
                what = "stream_column" if self.kind == "column" else f"stream template {self.template!r}"
                raise ConfigError(
                    f"{what} refers to column {col!r}, which is not in the batch: {sorted(names)}"
                )

    def validate_arrow(self, schema: StructType) -> None:
        """Check on the driver that `arrow_targets` gives the targets `expr` would: Arrow's text of a string,
        integer or boolean equals Spark's cast; of a double, timestamp or decimal it does not (``1.0`` is
        ``'1.0'`` in Spark and ``'1'`` in Arrow), so such a column would route rows elsewhere than
        ``foreachBatch(S2Writer)`` does. Refused rather than routed differently."""
        types = {f.name: f.dataType for f in schema.fields}
        for col in self.source_columns():
            kind = types.get(col)
            if kind is None or isinstance(kind, (StringType, IntegralType, BooleanType)):
                continue
            raise ConfigError(
                f"format('s2') routes by the text of column {col!r}, which is {kind.simpleString()}: "
                "its text in Arrow differs from Spark's cast (a double 1.0 is '1' in one and '1.0' in the "
                "other), so s2.stream-column and stream templates take string, integer and boolean columns "
                "here. Cast "
                f"it first (df.withColumn({col!r}, F.col({col!r}).cast('string'))), or write with "
                "foreachBatch(S2Writer), which routes in the JVM"
            )

    def expr(self, key_column: str, body_column: str) -> Column:
        """The target-stream expression over the record frame (with the source columns kept)."""
        if self.kind == "single":
            assert self.stream is not None
            return F.lit(self.stream)
        if self.kind == "column":
            assert self.column is not None
            return column_named(self.column).cast("string")
        if self.kind == "template":
            assert self.template is not None
            parts: list[Column] = []
            for literal, field_name, _spec, _conv in string.Formatter().parse(self.template):
                if literal:
                    parts.append(F.lit(literal))
                if field_name is not None:
                    parts.append(column_named(field_name).cast("string"))
            return F.concat(*parts)
        assert self.shards is not None
        assert self.stream is not None
        shard = F.pmod(F.xxhash64(F.coalesce(F.col(key_column), F.col(body_column))), F.lit(self.shards))
        return F.concat(F.lit(self.stream + "/"), shard.cast("string"))

    def arrow_targets(self, frame: pa.RecordBatch) -> pa.Array:
        """Each row's target stream over an Arrow record frame: `expr`'s twin (null = bad row). Column and
        template rules read the source columns kept in the frame, shards its ``_s2_key`` and ``_s2_body``;
        a single-stream rule has no per-row target."""
        if self.kind == "shards":
            return self._shard_targets(frame.column(KEY), frame.column(BODY))
        if self.kind == "column":
            assert self.column is not None
            return pc.cast(frame.column(self.column), pa.string())
        if self.kind != "template":
            raise ValueError(f"a {self.kind!r} routing rule has no per-row Arrow targets")
        assert self.template is not None
        parts: list[Any] = []
        for literal, field_name, _spec, _conv in string.Formatter().parse(self.template):
            if literal:
                parts.append(literal)
            if field_name is not None:
                parts.append(pc.cast(frame.column(field_name), pa.string()))
        if len(parts) == 1 and isinstance(parts[0], pa.Array):
            return parts[0]
        # Like Spark's concat, a null part makes the whole target null.
        return pc.binary_join_element_wise(*parts, "")

    def _shard_targets(self, key: pa.Array, body: pa.Array) -> pa.Array:
        """``<stream>/<pmod(xxhash64(coalesce(key, body)), shards)>`` per row, as Spark computes it."""
        assert self.shards is not None
        content = pc.coalesce(pc.cast(key, pa.binary()), pc.cast(body, pa.binary()))
        shards = self.shards
        index = [
            None if v is None else _signed(xxhash.xxh64_intdigest(v, _SPARK_SEED)) % shards
            for v in content.to_pylist()
        ]
        return pc.binary_join_element_wise(
            f"{self.stream}/", pc.cast(pa.array(index, pa.int64()), pa.string()), ""
        )

    def known_streams(self) -> list[str] | None:
        """Every stream the rule can target, when that set is fixed (single stream, shards)."""
        if self.kind == "single":
            assert self.stream is not None
            return [self.stream]
        if self.kind == "shards":
            assert self.shards is not None
            return [f"{self.stream}/{i}" for i in range(self.shards)]
        return None


def _signed(h: int) -> int:
    """An unsigned 64-bit hash as the signed long Spark's ``xxhash64`` returns."""
    return h - (1 << 64) if h >> 63 else h


def _template_fields(template: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"stream template {template!r} is malformed: {exc}") from exc
    fields: list[str] = []
    for _literal, field_name, spec, conv in parsed:
        if field_name is None:
            continue
        if not field_name or spec or conv:
            raise ConfigError(
                f"stream template {template!r}: placeholders must be plain column names like {{region}}"
            )
        if field_name not in fields:
            fields.append(field_name)
    return fields
