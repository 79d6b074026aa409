"""The upsert changelog's flat form (``_s2_key`` + ``_s2_action`` beside the row's own ``_s2_headers``,
as `S2Writer` ships it) against the lite server: the official SDK reads back exactly the records of the
list form (``@key``, ``@action``, then the row's own headers, the chunk tag last), on the bulk path and on
the record path, with the same chunks and result rows; the metered sizes and the list form built back
from a flat batch agree with the list form's own."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from s2_sink.encoders._changelog import changelog_metered, with_changelog_headers
from s2_sink.encoders._frame import ACTION, HEADERS, HEADERS_ARROW_TYPE, KEY
from s2_sink.encoders._metered import metered_bytes
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.unit.write.test_chunk_encodings import back, split, write
from tests.unit.write.test_partition_writer import RecordingTagger, frame

Header = tuple[bytes, bytes]


def changes(n: int) -> tuple[list[bytes], list[bytes], list[bytes], list[list[Header] | None]]:
    """Bodies (empty for a delete), key JSON, actions and the rows' own headers (none, one, two)."""
    keys = [b'{"id":%d}' % (i % 97) for i in range(n)]
    actions = [b"d" if i % 7 == 0 else b"u" for i in range(n)]
    bodies = [b"" if a == b"d" else b'{"v":"%s"}' % (b"x" * (i % 300)) for i, a in enumerate(actions)]
    own: list[list[Header] | None] = [
        None if i % 3 == 0 else [(b"h", bytes([i % 256])), ("ключ".encode(), b"")][: i % 3] for i in range(n)
    ]
    return bodies, keys, actions, own


def flat(
    bodies: list[bytes | None],
    keys: list[bytes],
    actions: list[bytes],
    own: list[list[Header] | None] | None,
    errors: list[str | None] | None = None,
) -> pa.RecordBatch:
    """A flat-form batch: the changelog in ``_s2_key``/``_s2_action``, ``own`` in ``_s2_headers`` (left
    out when ``None``)."""
    batch = frame(bodies, headers=own, errors=errors)
    batch = batch.set_column(batch.schema.get_field_index(KEY), KEY, pa.array(keys, pa.binary()))
    batch = batch.append_column(ACTION, pa.array(actions, pa.binary()))
    return batch if own is not None else batch.drop_columns([HEADERS])


def listed(
    keys: list[bytes], actions: list[bytes], own: list[list[Header] | None] | None
) -> list[list[Header]]:
    return [
        [(b"@key", k), (b"@action", a), *((own[i] or []) if own is not None else [])]
        for i, (k, a) in enumerate(zip(keys, actions, strict=True))
    ]


@pytest.mark.parametrize("with_own", [True, False])
def test_flat_changelog_reads_back_as_the_list_form(lite: LiteServer, basin: str, with_own: bool) -> None:
    """Bulk and record path write the same records from a flat frame: @key, @action, the row's own
    headers, each chunk's tag last on its first record; the same chunks as the list form's frame."""
    bodies, keys, actions, own = changes(1500)
    own_or_none = own if with_own else None
    headers = listed(keys, actions, own_or_none)
    sizes = [1, 500, 700, 299]
    runs = {
        "flat-bulk": (split(flat(bodies, keys, actions, own_or_none), sizes), True),
        "flat-records": (split(flat(bodies, keys, actions, own_or_none), sizes), False),
        "list-bulk": (split(frame(bodies, headers=headers), sizes), True),
    }
    basins = {name: fresh_basin(lite.endpoint) for name in runs}
    tags = {name: RecordingTagger() for name in runs}
    results = {}
    for name, (batches, bulk) in runs.items():
        results[name] = write(
            lite,
            basins[name],
            "s",
            batches,
            tagger=tags[name],
            bulk=bulk,
            batch_max_records=200,
            flush_buffer_bytes=30_000,
        )["s"]
    got = {name: [(b, h) for b, h, _ in back(lite, basins[name], "s")] for name in runs}
    expected = [(b, list(h)) for b, h in zip(bodies, headers, strict=True)]
    first = 0
    for chunk in tags["list-bulk"].seen:
        expected[first][1].append((b"@tag", f"s:{chunk.index}:{chunk.record_count}".encode()))
        first += chunk.record_count
    assert len(tags["list-bulk"].seen) > 8  # cut by count, by bytes and across batches
    for name in runs:
        assert got[name] == expected, name
        assert tags[name].seen == tags["list-bulk"].seen, name
        assert results[name]["records"] == 1500


def test_bad_rows_of_a_flat_batch_take_the_record_path(lite: LiteServer, basin: str) -> None:
    """A flat batch with a bad row: the good rows keep their changelog headers, the bad one is skipped,
    in one chunk with the all-good flat batches around it."""
    good = flat([b"g0", b"g1"], [b"k0", b"k1"], [b"u", b"d"], [[(b"h", b"1")], None])
    bad = flat([b"b0", b"b1"], [b"k2", b"k3"], [b"u", b""], [None, None], errors=[None, "unknown op"])
    for bulk in (True, False):
        result = write(lite, basin, f"mixed-{bulk}", [good, bad, good], bulk=bulk)
        assert result[None]["skipped"] == 1
        assert result[f"mixed-{bulk}"]["appends"] == 1
        assert [(b, h) for b, h, _ in back(lite, basin, f"mixed-{bulk}")] == [
            (b"g0", [(b"@key", b"k0"), (b"@action", b"u"), (b"h", b"1")]),
            (b"g1", [(b"@key", b"k1"), (b"@action", b"d")]),
            (b"b0", [(b"@key", b"k2"), (b"@action", b"u")]),
            (b"g0", [(b"@key", b"k0"), (b"@action", b"u"), (b"h", b"1")]),
            (b"g1", [(b"@key", b"k1"), (b"@action", b"d")]),
        ]


@pytest.mark.parametrize("with_own", [True, False])
def test_list_form_and_sizes_of_a_flat_batch(with_own: bool) -> None:
    """`with_changelog_headers` of a (sliced) flat batch is the list form's ``_s2_headers``, without
    ``_s2_action``; the flat metered sizes equal the list form's."""
    bodies, keys, actions, own = changes(40)
    own_or_none = own if with_own else None
    batch = flat(bodies, keys, actions, own_or_none).slice(3, 30)
    headers = listed(keys, actions, own_or_none)[3:33]
    want = pa.array([[{"name": n, "value": v} for n, v in h] for h in headers], HEADERS_ARROW_TYPE)
    got = with_changelog_headers(batch)
    assert ACTION not in got.schema.names
    assert got.column(HEADERS).to_pylist() == want.to_pylist()
    user = batch.column(HEADERS) if with_own else None
    sizes = pc.add(
        metered_bytes(batch.column("_s2_body"), user),
        changelog_metered(batch.column(KEY), batch.column(ACTION)),
    )
    assert sizes.to_pylist() == metered_bytes(batch.column("_s2_body"), want).to_pylist()
