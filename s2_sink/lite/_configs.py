"""
Basin and stream configuration documents: defaults, validation and partial updates (JSON, as on the wire)."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from s2_sink.lite._errors import bad, invalid

__all__ = [
    "Json",
    "apply_basin_config",
    "apply_stream_config",
    "default_basin_config",
    "default_stream_config",
    "parse_json",
]

Json = dict[str, Any]

_STORAGE_CLASSES = ("standard", "express")
_TIMESTAMPING_MODES = ("client-prefer", "client-require", "arrival")
_CIPHERS = ("aegis-256", "aes-256-gcm")
SEVEN_DAYS = 7 * 24 * 3600


def default_stream_config() -> Json:
    """A stream's configuration when nothing was specified (retention 7 days, client-prefer timestamps)."""
    return {
        "storage_class": "express",
        "retention_policy": {"age": SEVEN_DAYS},
        "timestamping": {"mode": "client-prefer", "uncapped": False},
        "delete_on_empty": {"min_age_secs": 0},
    }


def default_basin_config() -> Json:
    """A basin's configuration when nothing was specified."""
    return {
        "default_stream_config": default_stream_config(),
        "stream_cipher": None,
        "create_stream_on_append": False,
        "create_stream_on_read": False,
    }


def parse_json(body: bytes) -> Any:
    """Decode a request body; 400 ``bad_json`` when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad("bad_json", f"invalid JSON body: {exc}") from exc


def _want_obj(value: Any, what: str) -> Json:
    if not isinstance(value, dict):
        raise bad("bad_json", f"{what} must be a JSON object, got {value!r}")
    return value


def _want_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise bad("bad_json", f"{what} must be a boolean, got {value!r}")
    return value


def _want_uint(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad("bad_json", f"{what} must be a non-negative integer, got {value!r}")
    return value


def apply_stream_config(base: Json, patch: Any) -> Json:
    """Return ``base`` updated with the fields present in ``patch``; a JSON null resets a field to its
    default."""
    if patch is None:
        return copy.deepcopy(base)
    patch = _want_obj(patch, "stream config")
    out = copy.deepcopy(base)
    defaults = default_stream_config()
    for key, value in patch.items():
        if key == "storage_class":
            if value is None:
                out[key] = defaults[key]
            elif value not in _STORAGE_CLASSES:
                raise bad("bad_json", f"storage_class must be one of {_STORAGE_CLASSES}, got {value!r}")
            else:
                out[key] = value
        elif key == "retention_policy":
            if value is None:
                out[key] = defaults[key]
                continue
            rp = _want_obj(value, "retention_policy")
            if "infinite" in rp:
                out[key] = {"infinite": {}}
            elif "age" in rp:
                age = _want_uint(rp["age"], "retention_policy.age")
                if age == 0:
                    raise invalid("retention_policy.age must be greater than 0 seconds")
                out[key] = {"age": age}
            else:
                raise bad("bad_json", f"retention_policy needs 'age' or 'infinite', got {rp!r}")
        elif key == "timestamping":
            if value is None:
                out[key] = defaults[key]
                continue
            tsp = _want_obj(value, "timestamping")
            ts = dict(out[key])
            if "mode" in tsp:
                mode = tsp["mode"]
                if mode is None:
                    mode = "client-prefer"
                if mode not in _TIMESTAMPING_MODES:
                    raise bad(
                        "bad_json", f"timestamping.mode must be one of {_TIMESTAMPING_MODES}, got {mode!r}"
                    )
                ts["mode"] = mode
            if "uncapped" in tsp:
                ts["uncapped"] = False if tsp["uncapped"] is None else _want_bool(tsp["uncapped"], "uncapped")
            out[key] = ts
        elif key == "delete_on_empty":
            if value is None:
                out[key] = defaults[key]
                continue
            doe = _want_obj(value, "delete_on_empty")
            age = doe.get("min_age_secs", 0)
            out[key] = {"min_age_secs": 0 if age is None else _want_uint(age, "delete_on_empty.min_age_secs")}
        else:
            raise bad("bad_json", f"unknown stream config field {key!r}")
    return out


def apply_basin_config(base: Json, patch: Any) -> Json:
    """
    Return ``base`` updated with the fields present in ``patch`` (a BasinConfig or BasinReconfiguration)."""
    if patch is None:
        return copy.deepcopy(base)
    patch = _want_obj(patch, "basin config")
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if key == "default_stream_config":
            out[key] = apply_stream_config(out[key], value) if value is not None else default_stream_config()
        elif key == "stream_cipher":
            if value is not None and value not in _CIPHERS:
                raise bad("bad_json", f"stream_cipher must be one of {_CIPHERS}, got {value!r}")
            out[key] = value
        elif key in ("create_stream_on_append", "create_stream_on_read"):
            out[key] = False if value is None else _want_bool(value, key)
        else:
            raise bad("bad_json", f"unknown basin config field {key!r}")
    return out
