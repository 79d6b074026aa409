# %% [markdown]
# # Quickstart: a streaming query into an S2 stream, and back
#
# A Spark Structured Streaming query reads a rate source, `S2Writer` appends every micro-batch to an S2 stream
# (partition-parallel, through pooled append sessions), and `format("s2")` reads the stream back into a DataFrame.
#
# **Where it writes.** By default to the *embedded lite server*, an S2-compatible server started in this process:
# nothing to install, nothing leaves the machine. Set `S2_ACCESS_TOKEN` (and, for a server other than the S2 cloud,
# `S2_ACCOUNT_ENDPOINT` / `S2_BASIN_ENDPOINT`) before starting Jupyter to run the same notebook against S2;
# `S2_BASIN` names the basin (one is created if it does not exist).

# %%
import os
import shutil
import sys
import tempfile
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import s2_sink
from s2_sink import S2Config, S2Writer
from s2_sink.encoders import InsertEncoder
from s2_sink.testing import fresh_basin, unique_basin_name

print("s2_sink", s2_sink.__version__)

# %% [markdown]
# ## 1. Connect
# `S2Config` holds where and how to append. It is a frozen dataclass of plain values (it pickles to executors) and
# is validated when it is built, so a bad option fails here, on the driver, with the option's name in the message.

# %%
BASIN = os.environ.get("S2_BASIN") or unique_basin_name("quickstart")
STREAM = "quickstart/orders"

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
fresh_basin(cfg.account_endpoint, BASIN, token=cfg.access_token or "local")  # ensure the basin exists
cfg  # the token, if any, is never shown

# %% [markdown]
# ## 2. A streaming query
# A local Spark session and a rate source (`rate-micro-batch`: a fixed number of rows per micro-batch) shaped like
# orders. `S2Writer(cfg)` is the `foreachBatch` function:
# each micro-batch is encoded JVM-side (one JSON object per row) and appended by the executors.

# %%
# Spark's Python workers must use an interpreter that has s2_sink installed: in local mode, this kernel's.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
spark = (
    SparkSession.builder.master("local[2]")
    .appName("s2-quickstart")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")

orders = (
    spark.readStream.format("rate-micro-batch")  # the rate source with a fixed number of rows per micro-batch
    .option("rowsPerBatch", 5_000)
    .option("startTimestamp", int(time.time() * 1000))
    .option("numPartitions", 2)
    .load()
    .select(
        F.col("value").alias("order_id"),
        F.col("timestamp").alias("ts"),
        (F.col("value") % 50).alias("store"),
        F.round(F.rand(seed=7) * 100, 2).alias("amount"),
    )
)

writer = S2Writer(cfg, encoder=InsertEncoder())
checkpoint = tempfile.mkdtemp(prefix="s2-quickstart-")
query = (
    orders.writeStream.foreachBatch(writer)
    .option("checkpointLocation", checkpoint)
    .trigger(processingTime="2 seconds")
    .start()
)

# %% [markdown]
# Let it run for a few micro-batches, then stop it. `writer.history` keeps one `BatchMetrics` per micro-batch
# (rows in, records and bytes appended, appends, retries, ack latency p50/p99, duration); the same line is logged
# at INFO, and `S2Writer(on_metrics=...)` hands it to your own monitoring.

# %%
BATCHES = 4
deadline = time.monotonic() + 180
while len(writer.history) < BATCHES and time.monotonic() < deadline:
    if query.exception() is not None:
        raise query.exception()
    time.sleep(0.1)
query.stop()  # right after a batch: usually idle until the next trigger
assert len(writer.history) >= BATCHES, "the query did not get through its micro-batches in time"
for m in writer.history:
    print(m.log_line())

# %% [markdown]
# ## 3. Records per second, per micro-batch

# %%
import matplotlib.pyplot as plt

batches = list(writer.history)
fig, ax = plt.subplots(figsize=(7, 3))
ax.bar([m.batch_id for m in batches], [m.records_per_s for m in batches], color="#2a6f97")
ax.set_xlabel("micro-batch id")
ax.set_ylabel("records / s")
ax.set_title("S2Writer throughput per micro-batch (batch wall time)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Read the stream back
# `format("s2")` is a Spark Python data source. With `s2.format=json` and a schema, each record body is decoded
# into columns; `_s2_seq_num` is filled from the record's position in the stream.

# %%
s2_sink.register(spark)
options = {
    "s2.basin": cfg.basin,
    "s2.stream": STREAM,
    "s2.endpoints.account": cfg.account_endpoint,
    "s2.endpoints.basin": cfg.basin_endpoint,
    "s2.format": "json",
}
if cfg.access_token:
    options["s2.auth-token"] = cfg.access_token
back = (
    spark.read.format("s2")
    .options(**options)
    .schema("order_id long, ts timestamp, store long, amount double, _s2_seq_num long")
    .load()
)
back.orderBy("_s2_seq_num").show(5, truncate=False)

# %% [markdown]
# Every row of every finished micro-batch is in the stream once. (`rate-micro-batch` numbers its rows 0, 1, 2, ...
# across micro-batches; `query.stop()` may have interrupted one more batch after the ones counted here.)

# %%
written = sum(m.records for m in writer.history)
n, ids = back.agg(F.count("*"), F.countDistinct("order_id")).first()
first_rows = back.filter(F.col("order_id") < written).count()
print(f"appended {written} records in {len(batches)} micro-batches")
print(f"read back {n} records, {ids} distinct ids")
assert n == ids, "duplicates in the stream"
assert first_rows == written, "rows of a finished micro-batch are missing"

# %%
spark.stop()
if lite is not None:
    lite.stop()
shutil.rmtree(checkpoint, ignore_errors=True)
