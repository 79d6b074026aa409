"""Deterministic chunking: records in row order, cut into appends. Pure: sizes in, chunks out.

Per stream, records are cut greedily at ``max_records`` records or ``max_bytes`` metered bytes (a larger
record makes a chunk of one). Past ``max_open`` partial chunks the fullest others are emitted early, and
past ``max_held`` bytes held, the fullest until they fit: memory stays bounded however many streams a
task routes to. Every cut depends only on the ``(stream, size)`` sequence (and, past ``max_held``, where
the calls end), so a retried task re-creates the chunks an earlier attempt sent (exactly-once does not
depend on it: a retry subtracts what landed by content).
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
"""Receives each closed chunk: stream, its index among the stream's chunks, its items, their bytes."""


@dataclass(slots=True, eq=False)
class _Buffer(Generic[T]):
    items: list[T] = field(default_factory=list)
    count: int = 0
    """Records held (an item from `Chunker.add_span` stands for several)."""
    nbytes: int = 0
    emitted: int = 0


class Chunker(Generic[T]):
    """Cuts each stream's items (opaque: only their sizes decide) into chunks, each handed to ``emit``."""

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

    @property
    def streams(self) -> list[str]:
        return list(self._buffers)

    def add(self, stream: str, item: T, size: int) -> None:
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
        """Consecutive items for one stream: `add`'s cuts, found over the whole column of sizes."""
        self._add_cut(stream, sizes, lambda buf, lo, hi: buf.items.extend(items[lo:hi]))

    def add_span(
        self, stream: str, sizes: npt.ArrayLike, span: Callable[[int, int], T], total: int | None = None
    ) -> None:
        """Consecutive records for one stream by their sizes: a chunk holding records ``lo:hi`` of the run
        gets the one item ``span(lo, hi)``; `total`, the sum of `sizes` when the caller has it."""

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
        """A run cut as `add` would; ``put`` moves records ``lo:hi`` into the open chunk's items."""
        sizes = np.asarray(sizes, dtype=np.int64)
        n = len(sizes)
        if n == 0:
            return
        buf = self._buffer(stream)
        if buf.count + n < self.max_records:
            if total is None:
                total = int(sizes.sum())
            if buf.nbytes + total <= self.max_bytes:
                # Fits the open chunk (a routed stream's few rows): cut points would cost more than the rows.
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
        buf = self._buffers.get(stream)
        if buf is not None:
            self._close(stream, buf)

    def flush(self) -> None:
        for stream in sorted(self._open):
            self._close(stream, self._buffers[stream])

    def _buffer(self, stream: str) -> _Buffer[T]:
        buf = self._buffers.get(stream)
        if buf is None:
            buf = self._buffers[stream] = _Buffer()
        return buf

    def _opened(self, stream: str) -> None:
        """Past ``max_open`` partial chunks, the fullest others are emitted early."""
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
        """Past ``max_held`` bytes in open chunks, emit the fullest until they hold seven eighths of it: one
        sort per eighth sent, not one per item added."""
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
    """``[0, s0, s0 + s1, ...]``."""
    sizes = np.asarray(sizes, dtype=np.int64)
    prefix = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=prefix[1:])
    return prefix


def cut_points(
    prefix: npt.NDArray[np.int64], *, max_records: int, max_bytes: int, count: int = 0, nbytes: int = 0
) -> list[int]:
    """Where the greedy rule closes chunks in a run, given its `prefix_sums` and the open chunk before it
    (`count` < ``max_records`` items, `nbytes` bytes): cut ``e`` closes the chunk before item ``e`` (0:
    only the earlier items); the caller closes a final full chunk. One binary search per chunk.
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
