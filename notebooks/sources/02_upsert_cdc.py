# %% [markdown]
# # Upserts: a change data feed into an S2 changelog, materialized back into a table
#
# A table's change feed (the shape of Delta Lake's change data feed: the row's columns plus `_change_type`,
# `_commit_version`, `_commit_timestamp`) streams into S2 with `UpsertEncoder`. Each record carries the headers
# `@key` (JSON of the key columns) and `@action` (`u` upsert / `d` delete) and, for upserts, the JSON of the other
# columns as its body: the format of the Flink S2 connector's `s2-upsert` table, so a Flink job can read the stream
# (and write one this notebook can read). `format("s2")` then reads the changelog back and materializes it: the
# latest row per key, deletes applied. It must equal the source table's final state.
#
# Runs on the embedded lite server by default; set `S2_ACCESS_TOKEN` (and the endpoint variables) for S2.

# %%
import json
import os
import random
import shutil
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession

import s2_sink
from s2_sink import S2Config, S2Writer
from s2_sink.encoders import UpsertEncoder
from s2_sink.testing import fresh_basin, unique_basin_name

# %%
BASIN = os.environ.get("S2_BASIN") or unique_basin_name("upsert")
STREAM = "cdc/accounts"

if os.environ.get("S2_ACCESS_TOKEN"):
    lite = None
    cfg = S2Config.from_env(basin=BASIN, stream=STREAM, create_streams=True)
else:
    from s2_sink.lite import LiteServer

    lite = LiteServer().start()
    cfg = S2Config(
        basin=BASIN,
        stream=STREAM,
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
        create_streams=True,
    )
fresh_basin(cfg.account_endpoint, BASIN, token=cfg.access_token or "local")

# %% [markdown]
# ## 1. A change feed
# Five commits to an `accounts` table: inserts, updates (a `update_preimage` row with the old values and a
# `update_postimage` row with the new ones), deletes, and keys deleted and inserted again. We keep the table's state
# in a dict as we go: that is the expected result. Each commit is one JSON file, so a streaming file source
# replays the feed one commit per micro-batch (on Databricks: `spark.readStream.option("readChangeFeed", "true")
# .table("accounts")`).

# %%
rng = random.Random(42)
feed_dir = Path(tempfile.mkdtemp(prefix="cdf-"))
table: dict[int, dict] = {}
t0 = datetime(2026, 1, 1, tzinfo=UTC)

for version in range(1, 6):
    ts = (t0 + timedelta(minutes=version)).isoformat()
    changes = []
    for key in rng.sample(range(1, 301), 120):
        old = table.get(key)
        if old is None:
            balance = round(rng.uniform(0, 1000), 2)
            new = {"id": key, "owner": f"user-{key}", "balance": balance, "tier": "basic"}
            changes.append({**new, "_change_type": "insert"})
            table[key] = new
        elif rng.random() < 0.25:
            changes.append({**old, "_change_type": "delete"})
            del table[key]
        else:
            balance = round(old["balance"] + rng.uniform(-100, 100), 2)
            new = {**old, "balance": balance, "tier": rng.choice(["basic", "gold"])}
            changes.append({**old, "_change_type": "update_preimage"})
            changes.append({**new, "_change_type": "update_postimage"})
            table[key] = new
    path = feed_dir / f"{version:05d}.json"
    rows = [{**c, "_commit_version": version, "_commit_timestamp": ts} for c in changes]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.utime(path, (version, version))  # the file source takes the oldest file first

expected = sorted(table.values(), key=lambda r: r["id"])
n_rows = sum(len(p.read_text().splitlines()) for p in feed_dir.iterdir())
print(f"{len(list(feed_dir.iterdir()))} commits, {n_rows} change rows; final table: {len(expected)} rows")

# %% [markdown]
# ## 2. Stream the feed into S2 with `UpsertEncoder`
# `op_column="_change_type"` maps `insert`/`update_postimage` to `u`, `delete` to `d` and drops `update_preimage`
# rows; the commit columns are metadata, not part of the value. `partition_by_key=True` makes each key's changes
# go through one task, in order.

# %%
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this kernel's interpreter
spark = (
    SparkSession.builder.master("local[2]")
    .appName("s2-upsert-cdc")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")

feed = (
    spark.readStream.schema(
        "id long, owner string, balance double, tier string, "
        "_change_type string, _commit_version long, _commit_timestamp timestamp"
    )
    .option("maxFilesPerTrigger", 1)
    .json(str(feed_dir))
)
encoder = UpsertEncoder(
    key_columns=["id"], op_column="_change_type", exclude_columns=["_commit_version", "_commit_timestamp"]
)
writer = S2Writer(cfg, encoder=encoder, partition_by_key=True)
checkpoint = tempfile.mkdtemp(prefix="s2-cdc-")
query = (
    feed.writeStream.foreachBatch(writer)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)  # drain the feed, then stop
    .start()
)
query.awaitTermination()
for m in writer.history:
    print(m.log_line())

# %% [markdown]
# ## 3. The changelog in S2
# `s2.format=upsert` shows each record as (key, action, value): what any S2 reader, or Flink, sees.

# %%
s2_sink.register(spark)
conn = {
    "s2.basin": cfg.basin,
    "s2.stream": STREAM,
    "s2.endpoints.account": cfg.account_endpoint,
    "s2.endpoints.basin": cfg.basin_endpoint,
}
if cfg.access_token:
    conn["s2.auth-token"] = cfg.access_token
changelog = spark.read.format("s2").options(**conn).option("s2.format", "upsert").load()
changelog.select("seq_num", "key", "action", "value").orderBy("seq_num").show(8, truncate=False)
changelog.groupBy("action").count().show()

# %% [markdown]
# ## 4. Materialize: the latest row per key, deletes applied
# With `s2.upsert-materialize=true` and a schema, the columns are decoded from the key JSON merged with the value
# JSON.

# %%
latest = (
    spark.read.format("s2")
    .options(**conn)
    .option("s2.format", "upsert")
    .option("s2.upsert-materialize", "true")
    .schema("id long, owner string, balance double, tier string")
    .load()
)
got = sorted((r.asDict() for r in latest.collect()), key=lambda r: r["id"])
print(f"materialized {len(got)} rows; expected {len(expected)}")
latest.orderBy("id").show(5)
assert got == expected, "the materialized table differs from the source table"

# %%
spark.stop()
if lite is not None:
    lite.stop()
for path in (feed_dir, checkpoint):
    shutil.rmtree(path, ignore_errors=True)
