# %% [markdown]
# # Exactly once: kill a streaming query mid-batch, restart it, count
#
# A streaming query writes 9,000 rows (ids 0 .. 8,999) to an S2 stream, one input file per micro-batch. We kill
# its whole process tree (driver, JVM, Python workers) with `SIGKILL` in the middle of a micro-batch (some of the batch's appends acknowledged,
# the rest not sent; Spark has not recorded the batch as done), restart it from its checkpoint, and let it finish.
# Spark replays the interrupted micro-batch. `S2Writer`'s exactly-once delivery (the default) makes the replay
# write only what is missing, so every id is in the stream exactly once, as any reader of the stream sees it
# (here: the official S2 SDK, not our own reader). The mechanism is in `docs/exactly-once.md`.
#
# The query needs to be deterministic (a replayable source, deterministic transformations): a file source is.
#
# On the embedded lite server, acknowledgements are slowed down (a fault hook of the lite server) so that the kill
# lands inside a micro-batch. Against a real S2 endpoint (`S2_ACCESS_TOKEN` set) the kill lands wherever the query is.

# %%
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from s2_sdk import S2, Endpoints, ReadLimit, SeqNum

from s2_sink.testing import fresh_basin, unique_basin_name

BASIN = os.environ.get("S2_BASIN") or unique_basin_name("eo")
STREAM = "eo/events"
ROWS_PER_FILE, FILES = 1_500, 6
work = Path(tempfile.mkdtemp(prefix="s2-eo-"))

if os.environ.get("S2_ACCESS_TOKEN"):
    lite = None
    account = os.environ.get("S2_ACCOUNT_ENDPOINT", "https://a.s2.dev")
    basin_endpoint = os.environ.get("S2_BASIN_ENDPOINT", "https://{basin}.b.s2.dev")
    token = os.environ["S2_ACCESS_TOKEN"]
else:
    from s2_sink.lite import LiteServer

    lite = LiteServer(faults=True).start()  # fault hooks allowed (none armed yet)
    account = basin_endpoint = lite.endpoint
    token = "local"
fresh_basin(account, BASIN, token=token)

# %% [markdown]
# ## 1. The input: 6 files of 1,500 rows

# %%
src = work / "input"
src.mkdir()
for f in range(FILES):
    rows = range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE)
    path = src / f"part-{f:03d}.json"
    path.write_text("".join(json.dumps({"id": i, "payload": f"event {i}"}) + "\n" for i in rows))
    os.utime(path, (f + 1, f + 1))  # the file source takes the oldest file first
expected = set(range(FILES * ROWS_PER_FILE))

# %% [markdown]
# ## 2. The job
# An ordinary streaming job in its own process: a file source, one file per micro-batch, `S2Writer` with its
# default `delivery="exactly-once"`, a checkpoint directory. It drains the input (`availableNow`) and exits.
# Small appends (250 records, one in flight at a time) make six appends per micro-batch.

# %%
job = work / "job.py"
job.write_text(
    textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from s2_sink import S2Config, S2Writer
    from s2_sink.encoders import InsertEncoder

    basin, stream, src, checkpoint = sys.argv[1:5]
    spark = (SparkSession.builder.master("local[2]").appName("s2-eo-job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    # Appends of 250 records, one in flight at a time: several appends per micro-batch, one after the other.
    cfg = S2Config.from_env(
        basin=basin, stream=stream, create_streams=True, batch_max_records=250, max_inflight_requests=1
    )
    rows = spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1).json(src)
    query = (rows.writeStream.foreachBatch(S2Writer(cfg, encoder=InsertEncoder()))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("job finished")
""")
)
checkpoint = work / "checkpoint"
env = {
    **os.environ,
    "PYSPARK_PYTHON": sys.executable,
    "S2_ACCOUNT_ENDPOINT": account,
    "S2_BASIN_ENDPOINT": basin_endpoint,
    "S2_ACCESS_TOKEN": token,
}


def start_job() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(job), BASIN, STREAM, str(src), str(checkpoint)],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants: the driver, its JVM and Spark's Python workers (these run in
    a process group of their own, so killing the driver's group would leave them appending for a while)."""

    def tree(p: int) -> list[int]:
        found = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True, check=False)
        kids = found.stdout.split()
        return [p, *(q for k in kids for q in tree(int(k)))]

    for p in reversed(tree(pid)):  # the workers first
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


async def stream_records() -> list:
    """Every record of the stream (command records excluded), read with the official SDK."""
    out = []
    async with S2(token, endpoints=Endpoints(account=account, basin=basin_endpoint)) as s2:
        stream = s2.basin(BASIN).stream(STREAM)
        end, pos = (await stream.check_tail()).seq_num, 0
        while pos < end:
            batch = await stream.read(start=SeqNum(pos), limit=ReadLimit(count=1000))
            if not batch.records:
                break
            out.extend(batch.records)
            pos = batch.records[-1].seq_num + 1
    return [r for r in out if not r.is_command_record()]


# %% [markdown]
# ## 3. Run it and kill it in the middle of a micro-batch
# We watch the stream's tail and send `SIGKILL` to the job's whole process tree once the third micro-batch is
# partly written (the tail also counts the one `fence` command record the run wrote when it started).

# %%
if lite is not None:
    lite.faults.delay_acks(200)  # each acknowledgement takes 200 ms: a micro-batch takes over a second

first = start_job()
deadline = time.monotonic() + 240
seen = 0
async with S2(token, endpoints=Endpoints(account=account, basin=basin_endpoint)) as s2:
    stream = s2.basin(BASIN).stream(STREAM)
    while first.poll() is None and time.monotonic() < deadline:
        try:
            seen = (await stream.check_tail()).seq_num
        except Exception:  # the stream does not exist before the job's first append
            seen = 0
        data = seen - 1  # minus the fence record
        if data > 2 * ROWS_PER_FILE and data % ROWS_PER_FILE:
            kill_tree(first.pid)
            break
        await asyncio.sleep(0.02)
first.wait()
print(f"job ended by signal {-first.returncode}; stream tail at the kill: {seen}")
assert first.returncode == -signal.SIGKILL, first.stdout.read()[-3000:]
if lite is not None:
    lite.faults.clear()

# %% [markdown]
# What the kill left behind: records of a micro-batch that Spark's checkpoint does not list as committed.

# %%
committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
planned = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
in_stream = await stream_records()
print(f"micro-batches planned (offsets/): {planned}; committed (commits/): {committed}")
print(
    f"records in the stream after the kill: {len(in_stream)} "
    f"(= {len(in_stream) / ROWS_PER_FILE:.2f} micro-batches of {ROWS_PER_FILE})"
)
assert len(in_stream) < len(expected), "the job finished before the kill"
assert planned[-1] not in committed, "the kill did not interrupt a micro-batch"

# %% [markdown]
# ## 4. Restart from the checkpoint and let it finish

# %%
second = start_job()
out, _ = second.communicate(timeout=300)
assert second.returncode == 0, out[-3000:]
print(out.strip().splitlines()[-1])

# %% [markdown]
# ## 5. Count: zero duplicates, zero losses

# %%
from collections import Counter

records = await stream_records()
ids = Counter(json.loads(r.body)["id"] for r in records)
duplicates = sum(n - 1 for n in ids.values() if n > 1)
losses = len(expected - ids.keys())
unexpected = len(ids.keys() - expected)
print(f"rows expected: {len(expected)}")
print(f"records found: {len(records)}")
print(f"duplicates:    {duplicates}")
print(f"losses:        {losses}")
assert (duplicates, losses, unexpected) == (0, 0, 0)
assert len(records) == len(expected)

# %%
if lite is not None:
    lite.stop()
shutil.rmtree(work, ignore_errors=True)
