// The official TypeScript SDK's basic flow against a lite server: node flow.mjs <endpoint> <basin>.
// Unary calls go over fetch (HTTP/1.1); sessions over S2S (HTTP/2) or, with forceTransport "fetch", SSE.
// Prints one JSON line per step; exits non-zero on the first failed check.
import assert from "node:assert/strict";
import {
  AppendInput,
  AppendRecord,
  FencingTokenMismatchError,
  RangeNotSatisfiableError,
  S2,
  S2Endpoints,
  SeqNumMismatchError,
} from "@s2-dev/streamstore";

const [endpoint, basinName] = process.argv.slice(2);
const s2 = new S2({
  accessToken: "test",
  endpoints: new S2Endpoints({ account: endpoint, basin: endpoint }),
  retry: { maxAttempts: 1 },
});

function step(name, detail = {}) {
  console.log(JSON.stringify({ step: name, ...detail }));
}

async function rejects(promise, kind, check) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof kind, `expected ${kind.name}, got ${err?.constructor?.name}: ${err?.message}`);
    check?.(err);
    return err;
  }
  assert.fail(`expected ${kind.name}, but the call succeeded`);
}

async function collect(session, until) {
  const records = [];
  for await (const record of session) {
    records.push(record);
    if (until && records.length >= until) break;
  }
  return records;
}

await s2.basins.create({ basin: basinName });
const basin = s2.basin(basinName);
await basin.streams.create({ stream: "ts-flow" });
const listed = await basin.streams.list();
assert.deepEqual(listed.streams.map((s) => s.name), ["ts-flow"]);
step("create basin and stream");

const stream = basin.stream("ts-flow");
const ack = await stream.append(
  AppendInput.create([
    AppendRecord.string({ body: "hello", headers: [["k", "v"]] }),
    AppendRecord.bytes({ body: new Uint8Array([0, 1, 255]) }),
  ]),
);
assert.equal(ack.start.seqNum, 0);
assert.equal(ack.end.seqNum, 2);
const text = await stream.read({ start: { from: { seqNum: 0 } }, stop: { limits: { count: 1 } } });
assert.equal(text.records[0].body, "hello");
assert.deepEqual(text.records[0].headers, [["k", "v"]]);
const bytes = await stream.read({ start: { from: { seqNum: 1 } }, stop: { limits: { count: 1 } } }, { as: "bytes" });
assert.deepEqual([...bytes.records[0].body], [0, 1, 255]);
const tail = await stream.checkTail();
assert.equal(tail.tail.seqNum, 2);
step("unary append and read", { end: ack.end.seqNum });

const fence = AppendRecord.fence("ts-token");
await stream.append(AppendInput.create([fence], { matchSeqNum: 2 }));
await rejects(
  stream.append(AppendInput.create([AppendRecord.string({ body: "x" })], { fencingToken: "wrong" })),
  FencingTokenMismatchError,
  (err) => assert.equal(err.expectedFencingToken, "ts-token"),
);
await rejects(
  stream.append(AppendInput.create([AppendRecord.string({ body: "x" })], { matchSeqNum: 0, fencingToken: "ts-token" })),
  SeqNumMismatchError,
  (err) => assert.equal(err.expectedSeqNum, 3),
);
step("fencing and match_seq_num errors");

const session = await stream.appendSession();
const tickets = [];
for (let i = 0; i < 5; i++) {
  tickets.push(
    await session.submit(AppendInput.create([AppendRecord.string({ body: `s${i}` })], { fencingToken: "ts-token" })),
  );
}
const acks = await Promise.all(tickets.map((t) => t.ack()));
await session.close();
assert.deepEqual(acks.map((a) => a.start.seqNum), [3, 4, 5, 6, 7]);
step("append session", { end: acks[4].end.seqNum });

for (const transport of ["s2s", "fetch"]) {
  const reader = basin.stream("ts-flow", { forceTransport: transport });
  const got = await collect(
    await reader.readSession({ start: { from: { seqNum: 3 } }, stop: { limits: { count: 5 } } }),
  );
  assert.deepEqual(got.map((r) => r.body), ["s0", "s1", "s2", "s3", "s4"]);
  assert.deepEqual(got.map((r) => r.seqNum), [3, 4, 5, 6, 7]);
  await reader.close();
  step("bounded read session", { transport });
}

await rejects(
  stream.read({ start: { from: { seqNum: 100 } } }),
  RangeNotSatisfiableError,
  (err) => assert.equal(err.tail?.seqNum, 8),
);
step("416 past the tail");

await stream.close();
await basin.streams.delete({ stream: "ts-flow" });
step("done");
