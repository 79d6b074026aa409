"""Deterministic chunking: records in row order, cut into appends. Pure: sizes in, chunks out.

For each target stream, records are taken in row order and cut greedily at ``max_records`` records or
``max_bytes`` metered bytes, whichever comes first (a record larger than ``max_bytes`` on its own makes a
chunk of one). With many streams, when more than ``max_open`` partial chunks are open, the fullest other
one (by bytes, then by stream name) is emitted early (from ``max_open`` of 8 on, the fullest eighth: one
sort per eighth, not a scan per chunk); and when the open chunks hold more than ``max_held`` bytes
together, the fullest are emitted until they hold no more. So memory stays bounded however many streams a
task routes to, and thousands of streams of small appends still get one append per stream.

Every decision depends only on the sequence of ``(stream, size)`` given (and, past ``max_held``, on where
the calls end), so the same rows in the same Arrow batches always produce the same chunks: a retried task
re-creates the chunks an earlier attempt sent. Exactly-once does not depend on it (a retry subtracts
what landed record by record, by content), but it keeps a retry's appends the same as the first's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["Chunker", "Emit", "cut_points", "prefix_sums"]

T = TypeVar("T")

Emit = Callable[[str, int, list[T], int], None]
"""Receives each chunk as it is closed: stream, the chunk's 0-based index among that stream's chunks,
its items (one per record, or one per span given to `Chunker.add_span`) and their total metered size."""


@dataclass(slots=True, eq=False)
class _Buffer(Generic[T]):
    """The open (partial) chunk of one stream."""

    items: list[T] = field(default_factory=list)
    count: int = 0
    """Records held (an item from `Chunker.add_span` stands for several)."""
    nbytes: int = 0
    emitted: int = 0
    """Chunks of this stream emitted so far (the next chunk's index)."""


class Chunker(Generic[T]):
    """Cuts each stream's items into chunks and hands every chunk, once closed, to ``emit``.

    Holds at most ``max_open`` partial chunks (``max_open + 1`` for an instant, while the fullest other is
    being emitted). Items are opaque: only their metered sizes decide.
    """

    __slots__ = ("_buffers", "_emit", "_held", "_open", "max_bytes", "max_held", "max_open", "max_records")

    def __init__(
        self, *, max_records: int, max_bytes: int, max_open: int, emit: Emit[T], max_held: int | None = None
    ) -> None:
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_open = max_open
        self.max_held = max_held
        self._emit = emit
        self._buffers: dict[str, _Buffer[T]] = {}
        self._open: set[str] = set()
        self._held = 0
        """Bytes of the open (partial) chunks."""

    @property
    def streams(self) -> list[str]:
        """Every stream given an item so far, in the order of their first item."""
        return list(self._buffers)

    def add(self, stream: str, item: T, size: int) -> None:
        """One item of `size` metered bytes for `stream`."""
        buf = self._buffer(stream)
        if buf.count and (buf.count >= self.max_records or buf.nbytes + size > self.max_bytes):
            self._close(stream, buf)
        if not buf.count:
            self._opened(stream)
        buf.items.append(item)
        buf.count += 1
        buf.nbytes += size
        self._held += size
        if buf.count >= self.max_records:
            self._close(stream, buf)
        self._shed()

    def add_run(self, stream: str, items: Sequence[T], sizes: npt.ArrayLike) -> None:
        """Consecutive items for one stream: the same cuts as `add` item by item, found over the whole
        column of sizes (`cut_points`) rather than item by item (the single-stream fast path)."""
        self._add_cut(stream, sizes, lambda buf, lo, hi: buf.items.extend(items[lo:hi]))

    def add_span(
        self, stream: str, sizes: npt.ArrayLike, span: Callable[[int, int], T], total: int | None = None
    ) -> None:
        """Consecutive records for one stream, given only their sizes: each chunk gets, for the records
        ``lo:hi`` of this run it holds, the one item ``span(lo, hi)`` (e.g. a slice of Arrow columns), so
        no object per record is made. The cuts are those `add` would make record by record; `total`, the
        sum of `sizes` when the caller has it already."""

        def put(buf: _Buffer[T], lo: int, hi: int) -> None:
            if hi > lo:
                buf.items.append(span(lo, hi))

        self._add_cut(stream, sizes, put, total)

    def _add_cut(
        self,
        stream: str,
        sizes: npt.ArrayLike,
        put: Callable[[_Buffer[T], int, int], None],
        total: int | None = None,
    ) -> None:
        """Records ``0:n`` of a run (sizes given) for `stream`, cut as `add` would; ``put`` moves the
        records ``lo:hi`` into the open chunk's items."""
        sizes = np.asarray(sizes, dtype=np.int64)
        n = len(sizes)
        if n == 0:
            return
        buf = self._buffer(stream)
        if buf.count + n < self.max_records:
            if total is None:
                total = int(sizes.sum())
            if buf.nbytes + total <= self.max_bytes:
                # The run fits the open chunk, no cut (a routed stream's few rows of an Arrow batch): the
                # cut points' arrays and searches cost more than the rows.
                if not buf.count:
                    self._opened(stream)
                put(buf, 0, n)
                buf.count += n
                buf.nbytes += total
                self._held += total
                self._shed()
                return
        prefix = prefix_sums(sizes)
        cuts = cut_points(
            prefix,
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            count=buf.count,
            nbytes=buf.nbytes,
        )
        if not buf.count:
            self._opened(stream)
        start = 0
        for cut in cuts:
            put(buf, start, cut)
            buf.count += cut - start
            added = int(prefix[cut] - prefix[start])
            buf.nbytes += added
            self._held += added
            self._close(stream, buf)
            self._opened(stream)  # record `cut` starts the next chunk
            start = cut
        put(buf, start, n)
        buf.count += n - start
        added = int(prefix[n] - prefix[start])
        buf.nbytes += added
        self._held += added
        if buf.count >= self.max_records:
            self._close(stream, buf)
        self._shed()

    def close(self, stream: str) -> None:
        """Emit `stream`'s partial chunk now (its rows have ended)."""
        buf = self._buffers.get(stream)
        if buf is not None:
            self._close(stream, buf)

    def flush(self) -> None:
        """Emit every partial chunk (at the end of the input)."""
        for stream in sorted(self._open):
            self._close(stream, self._buffers[stream])

    def _buffer(self, stream: str) -> _Buffer[T]:
        buf = self._buffers.get(stream)
        if buf is None:
            buf = self._buffers[stream] = _Buffer()
        return buf

    def _opened(self, stream: str) -> None:
        """`stream` starts a partial chunk: past ``max_open``, the fullest other one is emitted early."""
        self._open.add(stream)
        if len(self._open) > self.max_open:
            # One sort per an eighth of max_open sent early, not a scan of the open chunks per send.
            sheds = len(self._open) - self.max_open + self.max_open // 8
            others = sorted(
                (s for s in self._open if s != stream),
                key=lambda s: (self._buffers[s].nbytes, s),
                reverse=True,
            )
            for fullest in others[:sheds]:
                self._close(fullest, self._buffers[fullest])

    def _shed(self) -> None:
        """Past ``max_held`` bytes in open chunks, emit the fullest (by bytes, then by stream name) until
        they hold at most seven eighths of it: one sort of the open chunks per eighth of ``max_held`` sent,
        not one per item added (thousands of open chunks at the cap made every add a sort)."""
        if self.max_held is None or self._held <= self.max_held:
            return
        low = self.max_held - self.max_held // 8
        fullest = sorted(self._open, key=lambda s: (self._buffers[s].nbytes, s), reverse=True)
        for stream in fullest:
            if self._held <= low:
                break
            self._close(stream, self._buffers[stream])

    def _close(self, stream: str, buf: _Buffer[T]) -> None:
        items, nbytes, count = buf.items, buf.nbytes, buf.count
        self._held -= nbytes
        buf.items, buf.nbytes, buf.count = [], 0, 0
        self._open.discard(stream)
        if not count:
            return
        index = buf.emitted
        buf.emitted += 1
        self._emit(stream, index, items, nbytes)


def prefix_sums(sizes: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``[0, s0, s0 + s1, ...]``: the running metered size of a run of items (``len(sizes) + 1`` values)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    prefix = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=prefix[1:])
    return prefix


def cut_points(
    prefix: npt.NDArray[np.int64], *, max_records: int, max_bytes: int, count: int = 0, nbytes: int = 0
) -> list[int]:
    """Where the greedy rule closes chunks inside a run of items, given the run's `prefix_sums` and the
    open chunk before it (`count` items, `nbytes` bytes; ``count < max_records``).

    Each cut ``e`` closes the open chunk just before item ``e`` (``0 <= e < n``; a cut at 0 closes only
    the earlier items). The caller closes a final chunk that reached ``max_records``. Sizes are never
    negative, so the running size only grows: one binary search per chunk finds its last item, instead of
    a step per item.
    """
    n = len(prefix) - 1
    cuts: list[int] = []
    start = 0
    while start < n:
        # The first item whose addition would pass max_bytes (an empty chunk takes any item).
        over = int(np.searchsorted(prefix, max_bytes - nbytes + prefix[start], side="right")) - 1
        end = min(max(over, start if count else start + 1), start + max_records - count)
        if end >= n:
            break
        cuts.append(end)
        start, count, nbytes = end, 0, 0
    return cuts
