"""UpsertEncoder: the flink-connector-s2 upsert changelog format.

Every record carries two headers, in this order: ``@key`` = JSON object of the key columns, ``@action`` =
``u`` (insert or update) or ``d`` (delete). A ``u`` body is the JSON object of the non-key columns; a ``d``
body is empty. Extra headers (``headers_column``) follow those two.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StringType, StructType

from s2_sink.encoders._arrow_json import json_object, json_parts
from s2_sink.encoders._arrow_types import (
    check_json_type,
    check_key_column,
    check_order_column,
    column_type,
    require_column,
)
from s2_sink.encoders._base import Encoder, first_error, oversize_errors
from s2_sink.encoders._change_order import (
    RANK,
    SEQ,
    null_order_column,
    order_by_columns,
    sorted_indices,
)
from s2_sink.encoders._changelog import ACTION_HEADER, KEY_HEADER, changelog_headers, changelog_metered
from s2_sink.encoders._frame import ACTION, FRAME_COLUMNS, STREAM, ArrowParts, Rows
from s2_sink.errors import ConfigError

__all__ = ["ACTION_HEADER", "KEY_HEADER", "UpsertEncoder"]

_DROP = "-"
# Change kinds (Delta CDF, Flink row kinds, the connector's own) -> ``@action``; update pre-images dropped.
_ACTIONS = {"insert": "u", "update_postimage": "u", "+I": "u", "+U": "u", "u": "u"}
_ACTIONS |= {"delete": "d", "-D": "d", "d": "d", "update_preimage": _DROP, "-U": _DROP}
_NULL_KEY = "upsert key column {!r} is null"
_EXPECTED = "insert, update_postimage, update_preimage, delete, +I, +U, -U, -D, u or d"


class UpsertEncoder(Encoder):
    """Changelog records readable by the Flink S2 connector's ``s2-upsert`` table source (and vice versa).

    ``key_columns``: the primary key, serialized in the order given (a null key column is an error).
    ``op_column``: a string column with the change kind (Delta CDF ``_change_type``, Flink row kinds, or
    ``u``/``d``; see ``_ACTIONS``); without it every row is an upsert.
    ``compact``: keep only the last change per key within a micro-batch (``project``) or Arrow batch
    (``encode_arrow``); see docs/encoding.md for what "last" and "order" mean.
    ``order_by``: the column (or columns) whose order is the change order (a commit version, an offset, a
    log position). With it, a key's changes are written in that order and ``compact`` keeps the last by
    it, whatever the partitioning (ties: see `_change_order`). Without it, the order is the input order.
    """

    key_columns: tuple[str, ...]
    op_column: str | None
    compact: bool
    order_by: tuple[str, ...]

    def __init__(
        self,
        key_columns: Sequence[str],
        *,
        op_column: str | None = None,
        compact: bool = False,
        order_by: str | Sequence[str] | None = None,
        headers_column: str | None = None,
        timestamp_column: str | None = None,
        exclude_columns: Sequence[str] = (),
    ) -> None:
        if isinstance(key_columns, str) or not key_columns:
            raise ConfigError(f"key_columns must be a non-empty list of column names, got {key_columns!r}")
        super().__init__(
            headers_column=headers_column, timestamp_column=timestamp_column, exclude_columns=exclude_columns
        )
        self.key_columns = tuple(key_columns)
        self.op_column = op_column
        self.compact = compact
        self.order_by = order_by_columns(order_by)

    @property
    def change_order(self) -> tuple[str, ...]:
        """The ``order_by`` columns."""
        return self.order_by

    @property
    def arranges(self) -> bool:
        return bool(self.order_by) or self.compact

    def _metadata_columns(self) -> tuple[str, ...]:
        op = (self.op_column,) if self.op_column else ()
        return (*super()._metadata_columns(), *op, *self.key_columns)

    def _validate(self, schema: StructType, data_columns: list[str]) -> None:
        for name in self.key_columns:
            require_column(schema, name, "upsert key")
            check_json_type(schema[name].dataType, name)
            check_key_column(schema, name)
        for name in self.order_by:
            check_order_column(schema, name)
        if self.op_column is not None:
            otype = column_type(schema, self.op_column, "op")
            if not isinstance(otype, StringType):
                raise ConfigError(
                    f"op column {self.op_column!r} has type {otype.simpleString()}; expected string "
                    "(Delta _change_type, Flink row kind +I/+U/-U/-D, or u/d)"
                )
        for name in data_columns:
            check_json_type(schema[name].dataType, name)
        if self.compact:
            clash = [c for c in schema.fieldNames() if c in (*FRAME_COLUMNS, ACTION, SEQ, RANK)]
            if clash:
                raise ConfigError(f"compact=True needs the column names {clash} free; rename those columns")

    @staticmethod
    def _action_arrow(batch: pa.RecordBatch, op_column: str) -> tuple[pa.Array, pa.Array | None]:
        """Each row's action (``u``, ``d``, `_DROP`, null for an unknown op) and error."""
        op = pc.cast(batch.column(op_column), pa.string())
        kinds = pc.index_in(op, value_set=pa.array(list(_ACTIONS)))
        action = pc.take(pa.array(list(_ACTIONS.values())), kinds)
        if action.null_count == 0:
            return action, None
        unknown = pc.binary_join_element_wise(
            f"op column {op_column!r} has unknown value '", op, f"' (expected {_EXPECTED})", ""
        )
        null_op = f"op column {op_column!r} is null"
        error = pc.if_else(pc.is_null(op), null_op, pc.if_else(pc.is_null(action), unknown, None))
        return action, error

    def _encode(self, rows: Rows) -> ArrowParts:
        batch, schema, data_columns, headers, timestamp, error, arranged, flat_changelog = rows
        action, op_error = None, None  # without an op column every row is an upsert
        if self.op_column is not None:  # drop update pre-images before anything else
            action, op_error = self._action_arrow(batch, self.op_column)
            keep = pc.fill_null(pc.not_equal(action, _DROP), True)
            if not pc.all(keep).as_py():
                batch, action, headers, timestamp, error = (
                    a.filter(keep) for a in (batch, action, headers, timestamp, error)
                )
                op_error = op_error.filter(keep) if op_error is not None else None
        n = len(batch)
        keys = list(self.key_columns)
        key_frags = [json_parts(batch.column(c), schema[c].dataType) for c in keys]
        key_json = json_object(keys, key_frags, n)
        nulls = [
            pc.if_else(pc.is_null(batch.column(c)), message(c), pa.scalar(None, pa.string()))
            for cols, message in ((keys, _NULL_KEY.format), (self.order_by, null_order_column))
            for c in cols
            if batch.column(c).null_count
        ]
        frags = [json_parts(batch.column(c), schema[c].dataType) for c in data_columns]
        body = pc.cast(json_object(data_columns, frags, n), pa.binary())
        if action is None:
            action_value = pa.repeat(pa.scalar(b"u"), n)
        else:
            # only a known delete has an empty body (an unknown op keeps its row's JSON for a dead letter)
            deletes = pc.fill_null(pc.equal(action, "d"), False)
            if pc.any(deletes).as_py():
                body = pc.if_else(deletes, pa.scalar(b""), body)
            action_value = pc.cast(pc.fill_null(action, ""), pa.binary())
        key = pc.cast(key_json, pa.binary())
        arrange = arranged and self.arranges
        if flat_changelog and not arrange:
            oversize = oversize_errors(body, headers, key_json, extra=changelog_metered(key, action_value))
            error = first_error(n, error, *nulls, op_error, oversize)
            return ArrowParts(batch, body, headers, timestamp, key, error, action=action_value)
        changelog = changelog_headers(key, action_value, headers)
        oversize = oversize_errors(body, changelog, key_json)
        error = first_error(n, error, *nulls, op_error, oversize)
        if arrange and self.order_by:  # rows in change order: "last" below is then the last by order_by
            order = sorted_indices(
                [batch.column(c) for c in self.order_by],
                body,
                changelog if self.headers_column is not None else None,
            )
            batch, body, changelog, timestamp, key, error = (
                a.take(order) for a in (batch, body, changelog, timestamp, key, error)
            )
        if arrange and self.compact:
            stream = batch.column(STREAM) if STREAM in batch.schema.names else None
            survive = _last_per_key(key, error, stream)
            if not pc.all(survive).as_py():
                batch, body, changelog, timestamp, key, error = (
                    a.filter(survive) for a in (batch, body, changelog, timestamp, key, error)
                )
        return ArrowParts(batch, body, changelog, timestamp, key, error)


def _last_per_key(key: pa.Array, error: pa.Array, stream: pa.Array | None) -> pa.Array:
    """True for the last row of each key (per target `stream` where the rows carry theirs: a key routed to
    two streams is a change in each) and every bad row (an error, no target), so compaction keeps batch
    order."""
    index = pa.array(np.arange(len(key), dtype=np.int64))
    ok = pc.is_null(error) if stream is None else pc.and_(pc.is_null(error), pc.is_valid(stream))
    rows = pa.table({"key": key.filter(ok), "i": index.filter(ok)})
    if stream is not None:
        rows = rows.append_column("stream", stream.filter(ok))
    last = rows.group_by([c for c in ("stream", "key") if c in rows.column_names]).aggregate([("i", "max")])
    return pc.or_(pc.is_in(index, value_set=last.column("i_max")), pc.invert(ok))
