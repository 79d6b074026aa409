"""Basin and stream configuration documents, resolved as the official s2-lite resolves them (JSON).

Three forms, as in S2's ``common/src/config.rs``:

- a stream's *config* is complete: every field resolved (``StreamConfig``); it is what a stream stores and
  what ``GET /v1/streams/{s}`` answers;
- an *optional* config has each field set or not (``OptionalStreamConfig``): a basin's
  ``default_stream_config`` and the config a create or ensure asks for;
- a *reconfiguration* (``PATCH``) names fields to change; a JSON ``null`` clears a field, which then falls
  back to the basin's default, then to the system default.

``merge`` resolves an optional config: the stream's field, else the basin's, else the system default
(express, 7 days, client-prefer, capped, no delete-on-empty). A create merges what it asks for with the
basin defaults; an ensure (``PUT``) on an existing stream sets its config to exactly that merge, so an ensure
without a body resets a configured stream to the defaults (``lite/src/backend/streams.rs``,
``provision_stream``).
Unknown JSON fields are ignored, as S2's deserializers ignore them.
"""

from __future__ import annotations

from typing import Any

import orjson

from s2_sink.lite._api_errors import bad, invalid

__all__ = [
    "Json",
    "basin_config_json",
    "default_basin_config",
    "merge",
    "optional_of",
    "parse_basin_config",
    "parse_json",
    "parse_stream_config",
    "reconfigure_basin",
    "reconfigure_stream",
]

Json = dict[str, Any]

_STORAGE_CLASSES = ("standard", "express")
_TIMESTAMPING_MODES = ("client-prefer", "client-require", "arrival")
_CIPHERS = ("aegis-256", "aes-256-gcm")
SEVEN_DAYS = 7 * 24 * 3600
_SYSTEM_DEFAULTS: Json = {
    "storage_class": "express",
    "retention_policy": {"age": SEVEN_DAYS},
    "timestamping": {"mode": "client-prefer", "uncapped": False},
    "delete_on_empty": {"min_age_secs": 0},
}


def parse_json(body: bytes) -> Any:
    """Decode a request body; 400 ``bad_json`` when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad("bad_json", f"invalid JSON body: {exc}") from exc


def _obj(value: Any, what: str) -> Json:
    if not isinstance(value, dict):
        raise bad("bad_json", f"{what} must be a JSON object, got {value!r}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise bad("bad_json", f"{what} must be a boolean, got {value!r}")
    return value


def _uint(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad("bad_json", f"{what} must be a non-negative integer, got {value!r}")
    return value


def _choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise bad("bad_json", f"{what} must be one of {choices}, got {value!r}")
    return str(value)


def _retention(value: Any) -> Json:
    rp = _obj(value, "retention_policy")
    if "age" in rp:
        age = _uint(rp["age"], "retention_policy.age")
        if age == 0:
            raise invalid("age must be greater than 0 seconds")
        return {"age": age}
    if "infinite" in rp:
        return {"infinite": {}}
    raise bad("bad_json", f"retention_policy needs 'age' or 'infinite', got {rp!r}")


def _empty_optional() -> Json:
    return {
        "storage_class": None,
        "retention_policy": None,
        "timestamping": {"mode": None, "uncapped": None},
        "delete_on_empty": {"min_age_secs": None},
    }


def parse_stream_config(doc: Any) -> Json:
    """An optional config from a ``StreamConfig`` JSON (None: nothing set); 400/422 on bad values."""
    out = _empty_optional()
    if doc is None:
        return out
    doc = _obj(doc, "stream config")
    if doc.get("storage_class") is not None:
        out["storage_class"] = _choice(doc["storage_class"], _STORAGE_CLASSES, "storage_class")
    if doc.get("retention_policy") is not None:
        out["retention_policy"] = _retention(doc["retention_policy"])
    ts = doc.get("timestamping")
    if ts is not None:
        ts = _obj(ts, "timestamping")
        if ts.get("mode") is not None:
            out["timestamping"]["mode"] = _choice(ts["mode"], _TIMESTAMPING_MODES, "timestamping.mode")
        if ts.get("uncapped") is not None:
            out["timestamping"]["uncapped"] = _bool(ts["uncapped"], "timestamping.uncapped")
    doe = doc.get("delete_on_empty")
    if doe is not None:
        # An explicit delete_on_empty sets min_age_secs, 0 if absent: a stream can opt out of its basin's.
        age = _obj(doe, "delete_on_empty").get("min_age_secs", 0)
        out["delete_on_empty"]["min_age_secs"] = _uint(age, "delete_on_empty.min_age_secs")
    return out


def merge(opt: Json, basin_defaults: Json) -> Json:
    """The complete config: each field of `opt`, else of `basin_defaults`, else the system default."""

    def pick(*path: str) -> Any:
        for layer in (opt, basin_defaults, _SYSTEM_DEFAULTS):
            value: Any = layer
            for key in path:
                value = value[key]
            if value is not None:
                return value
        raise AssertionError(path)  # the system defaults set every field

    return {
        "storage_class": pick("storage_class"),
        "retention_policy": dict(pick("retention_policy")),
        "timestamping": {"mode": pick("timestamping", "mode"), "uncapped": pick("timestamping", "uncapped")},
        "delete_on_empty": {"min_age_secs": pick("delete_on_empty", "min_age_secs")},
    }


def optional_of(config: Json) -> Json:
    """A complete config as an optional one with every field set."""
    return {
        "storage_class": config["storage_class"],
        "retention_policy": dict(config["retention_policy"]),
        "timestamping": dict(config["timestamping"]),
        "delete_on_empty": dict(config["delete_on_empty"]),
    }


def _reconfigure_optional(opt: Json, patch: Any) -> Json:
    """`opt` with a ``StreamReconfiguration`` applied: absent fields stay, ``null`` clears one."""
    patch = _obj(patch, "stream reconfiguration")
    out = {**opt, "timestamping": dict(opt["timestamping"]), "delete_on_empty": dict(opt["delete_on_empty"])}
    if "storage_class" in patch:
        value = patch["storage_class"]
        out["storage_class"] = None if value is None else _choice(value, _STORAGE_CLASSES, "storage_class")
    if "retention_policy" in patch:
        value = patch["retention_policy"]
        out["retention_policy"] = None if value is None else _retention(value)
    if "timestamping" in patch:
        ts = patch["timestamping"]
        if ts is None:
            out["timestamping"] = {"mode": None, "uncapped": None}
        else:
            ts = _obj(ts, "timestamping")
            if "mode" in ts:
                mode = ts["mode"]
                out["timestamping"]["mode"] = (
                    None if mode is None else _choice(mode, _TIMESTAMPING_MODES, "timestamping.mode")
                )
            if "uncapped" in ts:
                uncapped = ts["uncapped"]
                out["timestamping"]["uncapped"] = (
                    None if uncapped is None else _bool(uncapped, "timestamping.uncapped")
                )
    if "delete_on_empty" in patch:
        doe = patch["delete_on_empty"]
        if doe is None:
            out["delete_on_empty"] = {"min_age_secs": None}
        else:
            doe = _obj(doe, "delete_on_empty")
            if "min_age_secs" in doe:
                age = doe["min_age_secs"]
                out["delete_on_empty"]["min_age_secs"] = (
                    None if age is None else _uint(age, "delete_on_empty.min_age_secs")
                )
    return out


def reconfigure_stream(config: Json, patch: Any, basin_defaults: Json) -> Json:
    """A stream's complete config after a ``PATCH``: a cleared field takes the basin's default."""
    return merge(_reconfigure_optional(optional_of(config), patch), basin_defaults)


def default_basin_config() -> Json:
    """A basin's configuration when nothing was specified."""
    return parse_basin_config(None)


def parse_basin_config(doc: Any) -> Json:
    """A basin's configuration from a ``BasinConfig`` JSON (None: all defaults)."""
    if doc is None:
        doc = {}
    doc = _obj(doc, "basin config")
    cipher = doc.get("stream_cipher")
    return {
        "default_stream_config": parse_stream_config(doc.get("default_stream_config")),
        "stream_cipher": None if cipher is None else _choice(cipher, _CIPHERS, "stream_cipher"),
        "create_stream_on_append": _bool(
            doc.get("create_stream_on_append", False), "create_stream_on_append"
        ),
        "create_stream_on_read": _bool(doc.get("create_stream_on_read", False), "create_stream_on_read"),
    }


def reconfigure_basin(config: Json, patch: Any) -> Json:
    """A basin's configuration after a ``PATCH`` (``BasinReconfiguration``)."""
    patch = _obj(patch, "basin reconfiguration")
    out = dict(config)
    if "default_stream_config" in patch:
        inner = patch["default_stream_config"]
        out["default_stream_config"] = (
            _empty_optional()
            if inner is None
            else _reconfigure_optional(config["default_stream_config"], inner)
        )
    if "stream_cipher" in patch:
        cipher = patch["stream_cipher"]
        out["stream_cipher"] = None if cipher is None else _choice(cipher, _CIPHERS, "stream_cipher")
    for key in ("create_stream_on_append", "create_stream_on_read"):
        if key in patch:
            out[key] = _bool(patch[key], key)
    return out


def basin_config_json(config: Json) -> Json:
    """A basin's ``BasinConfig`` JSON: its default stream config shows only the fields set (null if none)."""
    opt = config["default_stream_config"]
    ts, doe = opt["timestamping"], opt["delete_on_empty"]
    shown: Json | None = {
        "storage_class": opt["storage_class"],
        "retention_policy": opt["retention_policy"],
        "timestamping": dict(ts) if ts["mode"] is not None or ts["uncapped"] is not None else None,
        "delete_on_empty": dict(doe) if doe["min_age_secs"] is not None else None,
    }
    if shown is not None and all(v is None for v in shown.values()):
        shown = None
    return {**config, "default_stream_config": shown}
