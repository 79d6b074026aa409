"""Run by tests/dist/test_wheel.py with the python of a fresh virtualenv holding only the built wheel.

It imports every module of the installed package and runs a tiny pipeline with whatever the wheel ships:
the lite server plus an SDK append/read, and an `S2Writer` micro-batch when the package exports one.
It prints one JSON line describing what it checked, so the test can assert on it.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import os
import pkgutil
import sys
import uuid
from importlib import resources
from typing import Any


def _import_all() -> list[str]:
    import s2_sink

    names = ["s2_sink"]
    for info in pkgutil.walk_packages(s2_sink.__path__, "s2_sink."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # importing a __main__ runs the program
        importlib.import_module(info.name)
        names.append(info.name)
    return names


async def _sdk_roundtrip(endpoint: str) -> int:
    from s2_sdk import S2, AppendInput, BasinConfig, Endpoints, ReadLimit, Record, SeqNum

    basin = f"w-{uuid.uuid4().hex[:16]}"
    async with S2("any", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
        await s2.ensure_basin(basin, config=BasinConfig(create_stream_on_append=True))
        stream = s2.basin(basin).stream("smoke")
        await stream.append(AppendInput(records=[Record(body=b"r%d" % i) for i in range(10)]))
        batch = await stream.read(start=SeqNum(0), limit=ReadLimit(count=100))
        return len(batch.records)


async def _count(endpoint: str, basin: str, stream: str) -> int:
    from s2_sdk import S2, Endpoints, ReadLimit, SeqNum

    async with S2("any", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
        batch = (
            await s2.basin(basin)
            .stream(stream)
            .read(start=SeqNum(0), limit=ReadLimit(count=1000), ignore_command_records=True)
        )
        return len(batch.records)


def _writer_batch(endpoint: str) -> int:
    from pyspark.sql import SparkSession
    from s2_sdk import S2, BasinConfig, Endpoints

    import s2_sink

    basin = f"w-{uuid.uuid4().hex[:16]}"

    async def ensure() -> None:
        async with S2("any", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
            await s2.ensure_basin(basin, config=BasinConfig(create_stream_on_append=True))
            await s2.basin(basin).ensure_stream("rows")

    asyncio.run(ensure())
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers: this venv's interpreter
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        cfg = s2_sink.S2Config(basin=basin, stream="rows", account_endpoint=endpoint, basin_endpoint=endpoint)
        from s2_sink.encoders import InsertEncoder

        # Called directly (not from foreachBatch), exactly-once needs an explicit identity.
        writer = s2_sink.S2Writer(cfg, encoder=InsertEncoder(), writer_id="wheel-smoke")
        writer(spark.range(50).selectExpr("id", "cast(id * 2 as string) as v"), 0)
    finally:
        spark.stop()
    return asyncio.run(_count(endpoint, basin, "rows"))


def main() -> None:
    import s2_sink

    report: dict[str, Any] = {
        "file": s2_sink.__file__,
        "prefix": sys.prefix,
        "version": s2_sink.__version__,
        "modules": _import_all(),
        "py_typed": resources.files("s2_sink").joinpath("py.typed").is_file(),
    }
    if importlib.util.find_spec("s2_sink.lite") is not None:
        from s2_sink.lite import LiteServer

        with LiteServer() as srv:
            report["sdk_records"] = asyncio.run(_sdk_roundtrip(srv.endpoint))
            if "S2Writer" in s2_sink.__all__:
                report["writer_records"] = _writer_batch(srv.endpoint)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
