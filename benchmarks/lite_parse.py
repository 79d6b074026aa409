"""The lite server's append decoding alone: ``parse_input``, and sequencing (decoding plus the records as
reads send them), per record.

    python -m benchmarks.lite_parse [--records 20000] [--batch 1000]

Appends of ~100-byte JSON bodies are encoded beforehand (as the writer's bulk path encodes them): with the
upsert encoder's two headers (``@key``, ``@action``), the same with a third header on each append's last
record, the same with client timestamps, body-only with an exactly-once chunk tag on each append's first
record, and body-only. Each is decoded by ``parse_input`` (the protobuf module's parse and canonical encoding,
then one walk per record) and sequenced by ``Stream.sequence`` (which also builds each record as reads send
it). Reported: the best of five passes, in microseconds of this process's CPU per record (run it under
``taskset -c 0`` for one core); the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pyarrow as pa

from benchmarks.append_proto import _frame
from s2_sink._exactly_once.tags import ChunkTag
from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.lite._append_input import parse_input
from s2_sink.lite._stream import Stream

__all__ = ["main"]


def _sequence(data: bytes, stream: list[Stream] = []) -> object:  # noqa: B006 - one stream per run
    """Sequence `data` on a stream of its own (a fresh one every 100 appends, so memory stays flat)."""
    if not stream or stream[0].next_seq >= 100_000:
        stream[:] = [Stream("b", "s", {"timestamping": {"mode": "client-prefer"}}, 0.0)]
    return stream[0].sequence(data, 1_700_000_000_000)


def _last_unlike(headers: pa.Array, bounds: list[int]) -> pa.Array:
    """`headers` with a third header on each append's last record."""
    rows = headers.to_pylist()
    name, value = rows[0][0].keys()
    for hi in bounds[1:]:
        rows[hi - 1] = [*rows[hi - 1], {name: b"@trace", value: b"1"}]
    return pa.array(rows, headers.type)


def _best(fn: Callable[[bytes], object], messages: list[bytes], records: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for message in messages:
            fn(message)
        best = min(best, time.process_time() - start)
    return round(best / records * 1e6, 3)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    n = args.records
    bounds = [*range(0, n, args.batch), n]
    body, headers = _frame(n, with_headers=True)
    stamps = pa.array([1_700_000_000_000 + i for i in range(n)], pa.int64())
    tags = [
        [ChunkTag("5f3a9c2e", 3, 1042, 7, 0, i, hi - lo).encode()]
        for i, (lo, hi) in enumerate(pairwise(bounds))
    ]
    inputs = {
        "two headers": encode_append_inputs(body, headers, None, bounds, fencing_token=None),
        "two headers, last unlike": encode_append_inputs(
            body, _last_unlike(headers, bounds), None, bounds, fencing_token=None
        ),
        "two headers + timestamp": encode_append_inputs(body, headers, stamps, bounds, fencing_token=None),
        "first record tagged": encode_append_inputs(
            body, None, None, bounds, fencing_token=None, first_record_headers=tags
        ),
        "body only": encode_append_inputs(body, None, None, bounds, fencing_token=None),
    }
    out: dict[str, Any] = {"records": n, "batch": args.batch}
    for name, messages in inputs.items():
        row = {
            "parse_input_us": _best(parse_input, messages, n),
            "sequence_us": _best(_sequence, messages, n),
        }
        out[name] = row
        print(f"{name:>24}: {row}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
