"""What every encoder shares: metadata columns, driver-side validation and the two entry points.

An encoder turns rows into the record frame (see ``_frame``) in one of two places:

- ``project(df)``: Spark expressions, evaluated in the JVM (what the streaming writer uses);
- ``encode_arrow(batch)``: Arrow kernels in Python (``format("s2")`` writes, tests, tools without Spark).

Both produce the same bytes for the same rows wherever docs/encoding.md says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import DataType, StructType

from s2_sink.encoders import _arrow_meta, _jvm
from s2_sink.encoders._frame import (
    ACTION,
    BODY,
    ERROR,
    HEADERS,
    KEY,
    TIMESTAMP,
    ArrowParts,
    JvmParts,
    frame_arrow_schema,
    raise_for_errors,
)
from s2_sink.encoders._options import check_headers_column, check_timestamp_column
from s2_sink.encoders._types import require_column
from s2_sink.errors import ConfigError

__all__ = ["Encoder", "ErrorMode", "FrameRecipe"]

ErrorMode = Literal["raise", "column"]


class Encoder:
    """Base of InsertEncoder and UpsertEncoder: plain data only, so it pickles to executors."""

    headers_column: str | None
    timestamp_column: str | None
    exclude_columns: tuple[str, ...]

    def __init__(
        self,
        *,
        headers_column: str | None,
        timestamp_column: str | None,
        exclude_columns: Sequence[str],
    ) -> None:
        if isinstance(exclude_columns, str):
            raise ConfigError(
                f"exclude_columns must be a list of column names, got the string {exclude_columns!r}"
            )
        self.headers_column = headers_column
        self.timestamp_column = timestamp_column
        self.exclude_columns = tuple(exclude_columns)

    @property
    def emits_headers(self) -> bool:
        """Whether any record can carry headers. When not, the writer leaves the (always null) headers column
        out of the frame it ships to Python: Arrow conversion of even a null ``array<struct>`` column costs
        the JVM several times the body's conversion."""
        return self.headers_column is not None

    @property
    def change_order(self) -> tuple[str, ...]:
        """Columns whose order is the order records of one key must be written in (``UpsertEncoder``'s
        ``order_by``); empty when the input order is the order."""
        return ()

    # -- what subclasses define --------------------------------------------------------------
    def _metadata_columns(self) -> tuple[str, ...]:
        """Columns that configure the record rather than form its body."""
        return tuple(c for c in (self.headers_column, self.timestamp_column) if c is not None)

    def _validate(self, schema: StructType, data_columns: list[str]) -> None:
        raise NotImplementedError

    def _project(
        self,
        df: DataFrame,
        *,
        data_columns: list[str],
        headers: Column,
        timestamp: Column,
        errors: list[Column],
    ) -> JvmParts:
        """(source df, body, headers, timestamp, key, error); the df may be filtered or reordered."""
        raise NotImplementedError

    def _project_changelog(
        self,
        df: DataFrame,
        *,
        data_columns: list[str],
        headers: Column,
        timestamp: Column,
        errors: list[Column],
    ) -> JvmParts | None:
        """`_project` with the upsert changelog flat: (source df, body, the rows' own headers, timestamp,
        key, action, error); ``None`` for an encoder whose records have no changelog headers."""
        return None

    def _encode(
        self,
        batch: pa.RecordBatch,
        *,
        schema: StructType,
        data_columns: list[str],
        headers: pa.Array,
        timestamp: pa.Array,
        error: pa.Array,
    ) -> ArrowParts:
        """(source batch, body, headers, timestamp, key, error); the batch filtered like the arrays."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def data_columns(self, schema: StructType, exclude: Sequence[str] = ()) -> list[str]:
        """The columns that form the body, in schema order."""
        skip = {*self._metadata_columns(), *self.exclude_columns, *exclude}
        return [c for c in schema.fieldNames() if c not in skip]

    def validate(self, schema: StructType, *, keep: Sequence[str] = (), exclude: Sequence[str] = ()) -> None:
        """Check ``schema`` on the driver; ConfigError names the column and its type.

        ``keep`` are columns the caller wants carried into the frame; ``exclude`` are columns (e.g. the stream
        routing column) that must not be part of the body.
        """
        for name in (*keep, *exclude, *self.exclude_columns):
            require_column(schema, name, "kept" if name in keep else "excluded")
        if self.headers_column is not None:
            check_headers_column(schema, self.headers_column)
        if self.timestamp_column is not None:
            check_timestamp_column(schema, self.timestamp_column)
        self._validate(schema, self.data_columns(schema, exclude))

    def project(
        self,
        df: DataFrame,
        *,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        flat_changelog: bool = False,
    ) -> DataFrame:
        """The record frame of ``df`` computed by Spark (pure DataFrame API, Spark Connect compatible).

        ``flat_changelog``: records that begin with the upsert changelog headers carry them in
        ``_s2_key`` and ``_s2_action`` rather than in ``_s2_headers`` (see `_changelog`); other encoders
        ignore it.
        """
        parts = self._parts(df, keep=keep, exclude=exclude, flat_changelog=flat_changelog)
        return parts.source.select(*_frame_columns(parts, keep))

    def recipe(
        self,
        df: DataFrame,
        *,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        flat_changelog: bool = False,
    ) -> FrameRecipe | None:
        """`project` of ``df`` as a `FrameRecipe` that projects any DataFrame of ``df``'s schema the same
        way (validated here, once), or None where the projection is more than a filter and a select of the
        input's columns by name (``compact=True`` ranks and reorders rows)."""
        parts = self._parts(df, keep=keep, exclude=exclude, flat_changelog=flat_changelog)
        if parts.source is not df and parts.where is None:
            return None
        names = (BODY, HEADERS, TIMESTAMP, KEY, ERROR, *([] if parts.action is None else [ACTION]), *keep)
        return FrameRecipe(parts.where, _frame_columns(parts, keep), names)

    def _parts(
        self, df: DataFrame, *, keep: Sequence[str], exclude: Sequence[str], flat_changelog: bool
    ) -> JvmParts:
        """Validate ``df``'s schema and build the projection's parts."""
        schema = df.schema
        _check_case_clashes(df, schema, skipped={*self.exclude_columns, *exclude} - set(keep))
        self.validate(schema, keep=keep, exclude=exclude)
        headers, headers_error = _jvm.headers_expr(self.headers_column)
        ts_type: DataType | None = schema[self.timestamp_column].dataType if self.timestamp_column else None
        timestamp, ts_error = _jvm.timestamp_expr(self.timestamp_column, ts_type)
        data_columns = self.data_columns(schema, exclude)
        errors = [headers_error, ts_error]
        flat = None
        if flat_changelog:
            flat = self._project_changelog(
                df, data_columns=data_columns, headers=headers, timestamp=timestamp, errors=errors
            )
        return flat or self._project(
            df, data_columns=data_columns, headers=headers, timestamp=timestamp, errors=errors
        )

    def encode_arrow(
        self,
        batch: pa.RecordBatch,
        *,
        schema: StructType | None = None,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        errors: ErrorMode = "raise",
        stream: str | None = None,
    ) -> pa.RecordBatch:
        """The record frame of an Arrow batch, computed in Python with Arrow kernels.

        ``schema`` is the batch's Spark schema (needed to tell day-time interval fields apart; derived from
        the Arrow types when omitted). ``errors="raise"`` raises EncodeError (naming ``stream`` when given)
        if any row cannot be encoded; ``errors="column"`` leaves the reasons in ``_s2_error``.
        """
        if schema is None:
            schema = from_arrow_schema(batch.schema, prefer_timestamp_ntz=True)
        self.validate(schema, keep=keep, exclude=exclude)
        headers, headers_error = _arrow_meta.headers(batch, self.headers_column)
        timestamp, ts_error = _arrow_meta.timestamp(batch, self.timestamp_column)
        error = _arrow_meta.first_error(len(batch), headers_error, ts_error)
        parts = self._encode(
            batch,
            schema=schema,
            data_columns=self.data_columns(schema, exclude),
            headers=headers,
            timestamp=timestamp,
            error=error,
        )
        src = parts.source
        kept = [src.column(c) for c in keep]
        frame = pa.RecordBatch.from_arrays(
            [parts.body, parts.headers, parts.timestamp, parts.key, parts.error, *kept],
            schema=frame_arrow_schema(pa.schema([src.schema.field(c) for c in keep])),
        )
        if errors == "raise":
            raise_for_errors(frame, stream=stream)
        return frame

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class FrameRecipe(NamedTuple):
    """A projection as a filter and a select of its input's columns by name, so it projects every DataFrame
    of the schema it was built for: a writer builds it once per schema, not once per micro-batch (in classic
    Spark each column expression built in Python is a round trip to the JVM, about a hundred of them)."""

    where: Column | None
    columns: list[Column]
    names: tuple[str, ...]
    """The frame's column names, in order."""

    def apply(self, df: DataFrame) -> DataFrame:
        """The record frame of ``df`` (of the schema the recipe was built for)."""
        return (df if self.where is None else df.filter(self.where)).select(*self.columns)


def _frame_columns(parts: JvmParts, keep: Sequence[str]) -> list[Column]:
    return [
        parts.body.alias(BODY),
        parts.headers.alias(HEADERS),
        parts.timestamp.alias(TIMESTAMP),
        parts.key.alias(KEY),
        parts.error.alias(ERROR),
        *([] if parts.action is None else [parts.action.alias(ACTION)]),
        *[_jvm.col(c) for c in keep],
    ]


def _check_case_clashes(df: DataFrame, schema: StructType, *, skipped: set[str]) -> None:
    """ConfigError for a column the projection names whose name differs only in case from another's:
    Spark resolves it as ambiguous unless ``spark.sql.caseSensitive`` is on (the session is asked only
    when there is one). ``skipped``: columns the projection does not name."""
    names = schema.fieldNames()  # ``df``'s schema, already fetched (under Spark Connect, a round trip)
    first: dict[str, str] = {}
    for name in names:
        first.setdefault(name.lower(), name)
    clashes = [
        (first[name.lower()], name)
        for name in names
        if first[name.lower()] != name and not {first[name.lower()], name} <= skipped
    ]
    if not clashes or str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return
    pairs = ", ".join(f"{a!r} and {b!r}" for a, b in clashes)
    raise ConfigError(
        f"columns {pairs} differ only in case: Spark resolves them as one ambiguous column while "
        "spark.sql.caseSensitive is false; rename one of them (or set spark.sql.caseSensitive=true)"
    )
