"""The writers' encoding step (`FrameEncoding`) without Spark: the frames it makes have the columns and types
the Spark schema it declares for them says (a layout's first stage declares that schema to ``mapInArrow``),
for every shape a writer asks for; a bad row's dead-letter payload is its input as JSON, good rows have none;
shards are named from the encoded key."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.frame_encoding import PLACE, FrameEncoding
from s2_sink.encoders import Encoder, InsertEncoder, KafkaEncoder, UpsertEncoder
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY, PAYLOAD

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("region", StringType()),
        StructField("op", StringType()),
        StructField("pos", LongType()),
    ]
)
ROWS = pa.RecordBatch.from_pylist(
    [
        {"id": 1, "region": "eu", "op": "u", "pos": 1},
        {"id": 2, "region": None, "op": "?", "pos": 2},
        {"id": None, "region": "us", "op": "d", "pos": None},
    ],
    schema=to_arrow_schema(SCHEMA),
)
SINGLE = Routing.build(stream="s", stream_column=None, shards=None)


def _encoding(encoder: Encoder | None, routing: Routing = SINGLE, **kw: object) -> FrameEncoding:
    return FrameEncoding(encoder, SCHEMA, routing, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "encoding",
    [
        _encoding(InsertEncoder()),
        _encoding(UpsertEncoder(["id"], op_column="op"), arranged=False),
        _encoding(UpsertEncoder(["id"], op_column="op", order_by="pos"), keep=("pos",), arranged=False),
        _encoding(UpsertEncoder(["id"], op_column="op", compact=True)),
        _encoding(InsertEncoder(), Routing.build(stream="s", stream_column=None, shards=7), payload=True),
        _encoding(
            InsertEncoder(),
            Routing.build(stream=None, stream_column="t/{region}", shards=None),
            layout=RecoveryLayout(3, routed=True, keys=(10, 11, 12)),
        ),
        _encoding(KafkaEncoder(value_column="region")),
    ],
    ids=[
        "insert",
        "upsert-flat",
        "upsert-ordered",
        "upsert-arranged",
        "shards-dlq",
        "template-replay",
        "kafka",
    ],
)
def test_frames_have_the_schema_the_encoding_declares(encoding: FrameEncoding) -> None:
    """Column for column, names and Arrow types of the frame are those of the declared Spark schema."""
    frame = next(encoding.frames([ROWS]))
    declared = to_arrow_schema(encoding.frame_schema())
    assert frame.schema.names == declared.names
    assert [f.type for f in frame.schema] == [f.type for f in declared]


def test_a_record_frame_passes_through_with_its_own_flat_changelog() -> None:
    """Rows that are a record frame already (``encoder=None``) keep their columns; missing frame columns are
    added as nulls, and a flat changelog's ``_s2_action`` is declared too."""
    schema = StructType([StructField(BODY, StringType()), StructField(KEY, StringType())])
    rows = pa.RecordBatch.from_pydict(
        {BODY: pa.array([b"x"], pa.binary()), KEY: pa.array([b"k"]), ACTION: pa.array([b"u"])}
    )
    schema = StructType([*schema.fields, StructField(ACTION, StringType())])
    encoding = FrameEncoding(None, schema, SINGLE)
    frame = next(encoding.frames([rows]))
    assert frame.schema.names == [*encoding.frame_schema().fieldNames()]
    assert frame.column(ACTION).to_pylist() == [b"u"]
    assert frame.column(HEADERS).null_count == 1


def test_a_bad_rows_payload_is_its_input_as_json_and_good_rows_have_none() -> None:
    """Under on_error='dlq', the payload of a bad row (a null upsert key, an unknown op) is the JSON of the
    row it came from; a good row's is null."""
    frame = next(
        _encoding(UpsertEncoder(["id"], op_column="op"), payload=True, arranged=False).frames([ROWS])
    )
    payloads = frame.column(PAYLOAD).to_pylist()
    errors = frame.column(ERROR).to_pylist()
    assert errors[0] is None
    assert payloads[0] is None
    assert [orjson.loads(p) for p in payloads[1:]] == [
        {"id": 2, "region": None, "op": "?", "pos": 2},
        {"id": None, "region": "us", "op": "d", "pos": None},
    ]
    assert all(e is not None for e in errors[1:])


def test_shards_are_named_from_the_encoded_key() -> None:
    """Shard routing in the encoding step: rows with one key get one shard, named after the stream."""
    routing = Routing.build(stream="ev", stream_column=None, shards=4)
    rows = pa.RecordBatch.from_pylist(
        [{"id": i % 3, "region": "x", "op": "u", "pos": i} for i in range(12)], schema=to_arrow_schema(SCHEMA)
    )
    frame = next(_encoding(UpsertEncoder(["id"]), routing, arranged=False).frames([rows]))
    by_key: dict[bytes, set[str]] = {}
    for key, stream in zip(
        frame.column(KEY).to_pylist(), frame.column(STREAM_COLUMN).to_pylist(), strict=True
    ):
        by_key.setdefault(key, set()).add(stream)
    assert all(len(s) == 1 for s in by_key.values())
    assert {s for v in by_key.values() for s in v} <= {f"ev/{i}" for i in range(4)}


def test_a_replay_ships_each_records_placement_key() -> None:
    """With a recovery layout, each frame row carries the placement key of the partition its content
    belongs to."""
    layout = RecoveryLayout(3, routed=False, keys=(100, 101, 102))
    frame = next(_encoding(InsertEncoder(), layout=layout).frames([ROWS]))
    bodies = frame.column(BODY).to_pylist()
    expected = [100 + layout.partition_of("s", [], b) for b in bodies]
    assert frame.column(PLACE).to_pylist() == expected
