"""The JSON data format of unary append/read (``s2-format: raw`` = UTF-8 text, ``base64`` = binary-safe)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from s2_sink.lite._api_errors import bad
from s2_sink.lite._wire import pb

__all__ = ["ack_to_json", "append_input_from_json", "read_batch_to_json"]


def _dec(value: Any, fmt: str, what: str) -> bytes:
    if not isinstance(value, str):
        raise bad("bad_json", f"{what} must be a string, got {value!r}")
    if fmt == "base64":
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise bad("bad_json", f"{what} is not valid base64") from exc
    return value.encode()


def _enc(value: bytes, fmt: str) -> str:
    if fmt == "base64":
        return base64.b64encode(value).decode()
    return value.decode(errors="replace")


def append_input_from_json(doc: Any, fmt: str) -> bytes:
    """An encoded ``AppendInput`` from the JSON request body."""
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise bad("bad_json", "append body must be an object with a 'records' array")
    inp = pb.AppendInput()
    for i, rec in enumerate(doc["records"]):
        if not isinstance(rec, dict):
            raise bad("bad_json", f"records[{i}] must be an object")
        r = inp.records.add()
        if rec.get("timestamp") is not None:
            ts = rec["timestamp"]
            if not isinstance(ts, int) or ts < 0:
                raise bad("bad_json", f"records[{i}].timestamp must be a non-negative integer, got {ts!r}")
            r.timestamp = ts
        for h in rec.get("headers") or []:
            if not isinstance(h, list) or len(h) != 2:
                raise bad("bad_json", f"records[{i}].headers items must be [name, value] pairs, got {h!r}")
            r.headers.add(name=_dec(h[0], fmt, "header name"), value=_dec(h[1], fmt, "header value"))
        if rec.get("body") is not None:
            r.body = _dec(rec["body"], fmt, "body")
    msn = doc.get("match_seq_num")
    if msn is not None:
        if not isinstance(msn, int) or msn < 0:
            raise bad("bad_json", f"match_seq_num must be a non-negative integer, got {msn!r}")
        inp.match_seq_num = msn
    tok = doc.get("fencing_token")
    if tok is not None:
        if not isinstance(tok, str):
            raise bad("bad_json", f"fencing_token must be a string, got {tok!r}")
        inp.fencing_token = tok
    out: bytes = inp.SerializeToString()
    return out


def ack_to_json(ack: bytes) -> dict[str, Any]:
    """AppendAck JSON from its encoding."""
    a = pb.AppendAck.FromString(ack)
    return {
        k: {"seq_num": getattr(a, k).seq_num, "timestamp": getattr(a, k).timestamp}
        for k in ("start", "end", "tail")
    }


def read_batch_to_json(batch: bytes, fmt: str) -> dict[str, Any]:
    """ReadBatch JSON from its encoding."""
    rb = pb.ReadBatch.FromString(batch)
    out: dict[str, Any] = {
        "records": [
            {
                "seq_num": r.seq_num,
                "timestamp": r.timestamp,
                "headers": [[_enc(h.name, fmt), _enc(h.value, fmt)] for h in r.headers],
                "body": _enc(r.body, fmt),
            }
            for r in rb.records
        ]
    }
    if rb.HasField("tail"):
        out["tail"] = {"seq_num": rb.tail.seq_num, "timestamp": rb.tail.timestamp}
    return out
