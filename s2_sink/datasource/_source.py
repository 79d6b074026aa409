"""``S2DataSource``: the ``format("s2")`` Python data source (batch and streaming; read and write)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from s2_sink._option_map import OptionMap
from s2_sink._read import read_options as ro
from s2_sink._read.rows.schemas import check_schema, default_schema
from s2_sink.config import S2Config
from s2_sink.datasource import _refused_options as refused
from s2_sink.datasource._compat import require_stream_arrow_writer

if TYPE_CHECKING:
    from s2_sink.datasource._write_options import WriteOptions

# Spark creates the data source, plans a read or a write, and runs each task in a fresh Python process, each
# of which unpickles this class: what a step needs is imported in the method that needs it (the SDK for the
# preflight and the planning, the readers and the writers), so creating the source imports none of it and a
# batch read task not the write side or the streaming reader.

__all__ = ["S2DataSource"]


def _ours(options: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in options.items() if k.startswith(refused.OUR_PREFIXES)}


def read_config(options: Mapping[str, str]) -> S2Config:
    """A read's connection settings, reader keys skipped; options of writes are refused."""
    refused.check_side(options, "read")
    refused.check_strays(options, "read")
    return S2Config.from_options(_ours(options), ignore=refused.READ_KEYS)


class S2DataSource(DataSource):
    """``format("s2")``: reads S2 streams into DataFrames and writes DataFrames to them. Options are validated
    on the driver, before any task runs."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._opts = OptionMap(options)  # names are case-insensitive

    @classmethod
    def name(cls) -> str:
        return "s2"

    def schema(self) -> StructType:
        return default_schema(ro.read_format(self._opts))

    def _reader_parts(self, schema: StructType, *, streaming: bool) -> tuple[S2Config, ro.ReadOptions]:
        # Before our own checks: a job ported from Kafka learns the s2 names first.
        refused.refuse_kafka_options(self._opts)
        opts = ro.parse_read_options(self._opts, streaming=streaming)
        cfg = read_config(self._opts)
        check_schema(opts.format, schema)
        from s2_sink._transport.preflight import enabled, preflight_read  # noqa: PLC0415

        if enabled(self._opts):
            preflight_read(cfg, opts.streams, what="format('s2') read")
        return cfg, opts

    def reader(self, schema: StructType) -> DataSourceReader:
        from s2_sink.datasource._readers import S2BatchReader  # noqa: PLC0415

        cfg, opts = self._reader_parts(schema, streaming=False)
        return S2BatchReader(cfg, opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from s2_sink.datasource._readers import S2StreamReader  # noqa: PLC0415

        cfg, opts = self._reader_parts(schema, streaming=True)
        return S2StreamReader(cfg, opts, schema)

    def _writer_options(self, schema: StructType, overwrite: bool, *, streaming: bool) -> WriteOptions:
        from s2_sink.datasource._spark_writers import check_overwrite  # noqa: PLC0415
        from s2_sink.datasource._write_options import WRITE_KEYS, parse_write_options  # noqa: PLC0415

        check_overwrite(overwrite)
        refused.check_side(self._opts, "write")
        cfg = S2Config.from_options(_ours(self._opts), ignore=WRITE_KEYS)
        opts = parse_write_options(self._opts, cfg=cfg, streaming=streaming)
        routing = opts.spec.routing
        routing.validate(schema)
        routing.validate_arrow(schema)
        opts.encoder.validate(schema, keep=routing.source_columns(), exclude=routing.body_exclusions())
        from s2_sink._transport.preflight import enabled, preflight_write  # noqa: PLC0415

        if enabled(self._opts):
            preflight_write(cfg, opts.spec.streams_to_create(), what="format('s2') write")
        return opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from s2_sink.datasource._spark_writers import S2BatchWriter  # noqa: PLC0415

        opts = self._writer_options(schema, overwrite, streaming=False)
        return S2BatchWriter(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        require_stream_arrow_writer()  # pyspark 4.0: refused here, on the driver, before options are read
        from s2_sink.datasource._spark_writers import S2StreamWriter, sink_identity  # noqa: PLC0415

        opts = self._writer_options(schema, overwrite, streaming=True)
        identity = None
        if opts.spec.exactly_once:
            identity = sink_identity(opts, self._opts.get("checkpointlocation"))
        return S2StreamWriter(opts, schema, identity)
