"""Append encoding throughput: rows/s from record frame to serialized ``AppendInput`` bytes, side by side.

    python -m benchmarks.append_proto [--rows 200000] [--chunk 1000] [--repeats 3]

Frames of ``--rows`` records with ~100-byte JSON bodies (a five-column row), cut into appends of
``--chunk`` records, each carrying a fencing token (as exactly-once appends do); measured without
headers and with two (``@key``/``@action``, as the upsert encoder writes them). Paths (one core):

- ``bulk``: ``s2_sink._wire.append.proto.encode_append_inputs`` straight from the Arrow columns;
- ``sdk_mapping``: the SDK's per-record mapping of ready ``Record`` objects
  (``append_input_to_proto(...).SerializeToString()``, what its append session does per input);
- ``sdk_from_arrow``: the same, plus turning the columns into ``Record`` objects first (the
  writer's path today).

Every path's bytes are checked equal before timing. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from s2_sdk import AppendInput, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.encoders._frame import HEADERS_ARROW_TYPE

__all__ = ["main"]

_TOKEN = "writer-7f3a9c01-run-3"


def _frame(rows: int, with_headers: bool) -> tuple[pa.Array, pa.Array | None]:
    """~100-byte JSON bodies of a five-column row, and (optionally) upsert-style key/action headers."""
    ids = np.arange(rows)
    body = pa.array(
        [
            f'{{"id":{i},"name":"user-{i % 100000}-{"x" * 24}","score":{i / 7:.6f},'
            f'"ts":"2023-11-14T22:13:20Z","category":"cat{i % 10}"}}'.encode()
            for i in ids.tolist()
        ],
        pa.binary(),
    )
    if not with_headers:
        return body, None
    names = pa.array([b"@key", b"@action"] * rows, pa.binary())
    values = pa.array([v for i in ids.tolist() for v in (f'{{"id":{i}}}'.encode(), b"u")], pa.binary())
    entries = pa.StructArray.from_arrays([names, values], fields=list(HEADERS_ARROW_TYPE.value_type))
    headers = pa.ListArray.from_arrays(pa.array(np.arange(0, 2 * rows + 1, 2), pa.int32()), entries)
    return body, headers


def _records(body: pa.Array, headers: pa.Array | None) -> list[Record]:
    """Columns to SDK records the way the writer builds them (flat child arrays, no per-row dicts)."""
    bodies: list[bytes] = body.to_pylist()
    if headers is None:
        return [Record(b) for b in bodies]
    offsets: list[int] = headers.offsets.to_pylist()
    flat = headers.flatten()
    pairs = list(zip(flat.field("name").to_pylist(), flat.field("value").to_pylist(), strict=True))
    return [Record(b, pairs[offsets[i] : offsets[i + 1]]) for i, b in enumerate(bodies)]


def _sdk_bytes(records: list[Record], bounds: list[int]) -> list[bytes]:
    return [
        append_input_to_proto(AppendInput(records[lo:hi], fencing_token=_TOKEN)).SerializeToString()
        for lo, hi in itertools.pairwise(bounds)
    ]


def _best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _measure(rows: int, chunk: int, repeats: int, with_headers: bool) -> dict[str, float]:
    body, headers = _frame(rows, with_headers)
    bounds = np.append(np.arange(0, rows, chunk), rows)
    bound_list: list[int] = bounds.tolist()
    records = _records(body, headers)
    paths: dict[str, Callable[[], list[bytes]]] = {
        "bulk": lambda: encode_append_inputs(body, headers, None, bounds, fencing_token=_TOKEN),
        "sdk_mapping": lambda: _sdk_bytes(records, bound_list),
        "sdk_from_arrow": lambda: _sdk_bytes(_records(body, headers), bound_list),
    }
    reference = paths["sdk_mapping"]()
    for name, fn in paths.items():
        if fn() != reference:
            raise AssertionError(f"{name} does not produce the SDK's bytes")
    # Interleaved rounds, best of each: the paths see the same machine load.
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(repeats):
        for name, fn in paths.items():
            best[name] = min(best[name], _best(fn, 1))
    suffix = "_2_headers" if with_headers else "_no_headers"
    out = {f"{name}{suffix}": rows / elapsed for name, elapsed in best.items()}
    out[f"bulk_vs_sdk_mapping{suffix}"] = best["sdk_mapping"] / best["bulk"]
    out[f"bulk_vs_sdk_from_arrow{suffix}"] = best["sdk_from_arrow"] / best["bulk"]
    out[f"mib_per_s_bulk{suffix}"] = sum(map(len, reference)) / best["bulk"] / 2**20
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print rows/s per path and the ratios; the last line is one JSON object."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=200_000, help="records per measurement")
    parser.add_argument("--chunk", type=int, default=1000, help="records per append")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per path (best is kept)")
    args = parser.parse_args(argv)
    results: dict[str, float] = {"rows": args.rows, "chunk": args.chunk}
    for with_headers in (False, True):
        results |= _measure(args.rows, args.chunk, args.repeats, with_headers)
    for name, value in results.items():
        sys.stdout.write(f"{name:>36}: {value:,.{2 if 'vs' in name else 0}f}\n")
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
