"""The routing rule's two twins agree: the Spark expression `S2Writer` plans on the driver and the Arrow
computation tasks run (``format("s2")``'s columns and templates, every writer's shards) give every row the
same target stream (null = bad row)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType

from s2_sink._write.driver.routing import Routing
from s2_sink.errors import ConfigError

pytestmark = pytest.mark.spark

_ROWS = [
    ("eu", 1, 10**12, True),
    (None, None, None, None),
    ("us-é", -7, 3, False),
    ("ap/south", 0, None, True),
    ("", 42, -(2**40), None),
]
_DDL = "region string, n int, big long, flag boolean"


@pytest.fixture(scope="module")
def rows(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(_ROWS, _DDL)


def _both(df: DataFrame, stream_column: str) -> tuple[list[str | None], list[str | None]]:
    routing = Routing.build(stream=None, stream_column=stream_column, shards=None)
    # The frame columns the shard rule reads are not used by column and template rules.
    jvm = [row[0] for row in df.select(routing.expr("_s2_key", "_s2_body")).collect()]
    batch = df.toArrow().combine_chunks().to_batches()[0]
    arrow: list[str | None] = routing.arrow_targets(batch).to_pylist()
    return jvm, arrow


@pytest.mark.parametrize(
    "stream_column",
    [
        "region",
        "n",
        "big",
        "flag",
        "{region}",
        "events/{region}",
        "ev/{region}/{n}",
        "{n}-{big}.{flag}",
        "t/{region}/{region}",
    ],
)
def test_expression_and_arrow_targets_are_equal(rows: DataFrame, stream_column: str) -> None:
    """Column and template rules over strings, integers and booleans, with nulls (a null in any
    placeholder makes the whole target null), give the same targets in Spark and in Arrow."""
    jvm, arrow = _both(rows, stream_column)
    assert len(jvm) == len(_ROWS)
    assert arrow == jvm


def test_double_columns_differ_so_format_s2_refuses_them(spark: SparkSession) -> None:
    """A double routing column's text differs between Spark ('1.0') and Arrow ('1'); format("s2"), which
    routes in Arrow, refuses such a column on the driver, naming it, its type and the cast that fixes it."""
    jvm, arrow = _both(spark.createDataFrame([(1.0,), (2.5,), (None,)], "d double"), "d")
    assert jvm != arrow
    routing = Routing.build(stream=None, stream_column="d", shards=None)
    with pytest.raises(ConfigError, match=r"column 'd', which is double.*cast\('string'\)"):
        routing.validate_arrow(StructType([StructField("d", DoubleType())]))
    for kind in (StringType(), LongType(), BooleanType()):
        routing.validate_arrow(StructType([StructField("d", kind)]))


@pytest.mark.parametrize("shards", [1, 7, 100_000])
def test_shards_in_arrow_are_sparks_xxhash64(spark: SparkSession, shards: int) -> None:
    """The shard a task computes for a record (XXH64 of its key, else of its body) is the one Spark's
    ``pmod(xxhash64(coalesce(_s2_key, _s2_body)), n)`` names: keys of every length class (under 4, 4-7,
    8-31 bytes and 32-byte stripes), empty and non-UTF-8 keys, and null keys that fall back to the body."""
    keys: list[bytes | None] = [
        None,
        b"",
        b"\xff\xfe",
        *(bytes(range(n)) for n in (1, 3, 4, 7, 8, 31, 32, 100)),
    ]
    keys += [f"user-{i}".encode() for i in range(200)]
    bodies = [b'{"n":%d}' % i for i in range(len(keys))]
    df = spark.createDataFrame(list(zip(keys, bodies, strict=True)), "_s2_key binary, _s2_body binary")
    routing = Routing.build(stream="events", stream_column=None, shards=shards)
    jvm = [row[0] for row in df.select(routing.expr("_s2_key", "_s2_body")).collect()]
    batch = pa.RecordBatch.from_pydict(
        {"_s2_key": pa.array(keys, pa.binary()), "_s2_body": pa.array(bodies, pa.binary())}
    )
    assert routing.arrow_targets(batch).to_pylist() == jvm
    assert len(set(jvm)) > min(shards, 10) // 2  # the keys spread
