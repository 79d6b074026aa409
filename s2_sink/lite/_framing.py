"""S2S session framing: ``[len:3 BE][flag:1][payload]`` where ``len`` counts the flag and the payload.

Flag bits: 7 = terminal, 6-5 = compression (00 none, 01 zstd, 10 gzip), 4 = reconnect advised. A terminal
payload is a 2-byte status followed by the JSON error body.
"""

from __future__ import annotations

import gzip

import zstandard

from s2_sink.lite._api_errors import ApiError, bad

__all__ = [
    "COMPRESS_GZIP",
    "COMPRESS_NONE",
    "COMPRESS_ZSTD",
    "FrameReader",
    "decompress",
    "encode_frame",
    "encode_terminal",
    "pick_compression",
]

MAX_FRAME_BYTES = 2 * 1024 * 1024
COMPRESSION_THRESHOLD = 1024
COMPRESS_NONE = 0
COMPRESS_ZSTD = 1
COMPRESS_GZIP = 2
_TERMINAL = 0x80

_zstd_c = zstandard.ZstdCompressor()
_zstd_d = zstandard.ZstdDecompressor()


def pick_compression(accept_encoding: str | None) -> int:
    """Server-to-client compression from the request's Accept-Encoding: zstd preferred, then gzip."""
    if not accept_encoding:
        return COMPRESS_NONE
    names = {part.split(";")[0].strip().lower() for part in accept_encoding.split(",")}
    if "zstd" in names:
        return COMPRESS_ZSTD
    if "gzip" in names:
        return COMPRESS_GZIP
    return COMPRESS_NONE


def decompress(payload: bytes, cc: int) -> bytes:
    """Inflate a zstd or gzip payload; 400 ``bad_frame`` if corrupt or larger than 2 MiB."""
    try:
        if cc == COMPRESS_ZSTD:
            # stream_reader copes with frames that do not record their content size.
            with _zstd_d.stream_reader(payload) as reader:
                out: bytes = reader.read(MAX_FRAME_BYTES)
        else:
            out = gzip.decompress(payload)
    except Exception as exc:
        raise bad("bad_frame", f"cannot decompress frame: {exc}") from exc
    if len(out) >= MAX_FRAME_BYTES:
        raise bad("bad_frame", "decompressed frame exceeds 2 MiB")
    return out


def encode_frame(payload: bytes, compression: int = COMPRESS_NONE) -> bytes:
    """One regular frame; compresses only payloads of at least 1 KiB, as the SDK does."""
    flag = 0
    if compression and len(payload) >= COMPRESSION_THRESHOLD:
        payload = _zstd_c.compress(payload) if compression == COMPRESS_ZSTD else gzip.compress(payload)
        flag = compression << 5
    n = len(payload) + 1
    return bytes(((n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF, flag)) + payload


def encode_terminal(error: ApiError) -> bytes:
    """A terminal frame carrying the error's status and JSON body."""
    body = error.status.to_bytes(2, "big") + error.body()
    n = len(body) + 1
    return n.to_bytes(3, "big") + bytes((_TERMINAL,)) + body


class FrameReader:
    """Incremental frame decoder: feed DATA chunks, get whole (decompressed) payloads back."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes buffered towards an incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> tuple[list[bytes], ApiError | None]:
        """Add a chunk; return the payloads of the frames it completes and, if a frame is malformed, the
        ``bad_frame`` error that ends the input there (the payloads before it are still valid)."""
        buf = self._buf
        if not buf and len(data) >= 4:
            # Fast path: the chunk is exactly one uncompressed frame (the SDK writes whole frames).
            n = (data[0] << 16) | (data[1] << 8) | data[2]
            if len(data) == n + 3 and data[3] == 0 and 0 < n <= MAX_FRAME_BYTES:
                return [data[4:]], None
        buf += data
        out: list[bytes] = []
        pos = 0
        size = len(buf)
        err: ApiError | None = None
        while size - pos >= 4:
            n = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if n == 0:
                err = bad("bad_frame", "empty frame")
                break
            if n > MAX_FRAME_BYTES:
                err = bad("bad_frame", f"frame of {n} bytes exceeds 2 MiB")
                break
            if size - pos < n + 3:
                break
            flag = buf[pos + 3]
            payload = bytes(buf[pos + 4 : pos + 3 + n])
            pos += n + 3
            cc = (flag >> 5) & 0x3
            if flag & _TERMINAL:
                err = bad("bad_frame", "Unexpected terminal frame as input")
            elif cc == 3:
                err = bad("bad_frame", "invalid compression bits in frame")
            elif flag & 0x0F:
                err = bad("bad_frame", "reserved flag bits set")
            else:
                try:
                    out.append(decompress(payload, cc) if cc else payload)
                except ApiError as exc:
                    err = exc
            if err is not None:
                break
        if pos:
            del buf[:pos]
        return out, err
