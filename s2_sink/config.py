"""Connection and batching settings for writing to S2: one frozen, keyword-only dataclass of plain values that
pickles to executors and is validated once, when built (on the driver). `S2Config.from_options` takes the
Flink S2 connector sink's option names (plus a few of ours, prefixed like theirs).

The token and endpoints not given come from the SDK's variables (``S2_ACCESS_TOKEN``, ``S2_ACCOUNT_ENDPOINT``,
``S2_BASIN_ENDPOINT``), so the lite server's exports point any example at it. The token never appears in
`repr`, logs or errors.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args
from urllib.parse import SplitResult, urlsplit

from s2_sink._env_hints import missing_token
from s2_sink._option_map import OptionMap, WriteParallelism, parse_bool, parse_write_parallelism
from s2_sink._stream_names import shown, stream_name_problem
from s2_sink.errors import ConfigError

__all__ = ["OPTION_KEYS", "WRITE_ONLY_OPTION_KEYS", "S2Config"]

ONE_MIB: Final = 1024 * 1024
MAX_BATCH_RECORDS: Final = 1000
CLOUD_ACCOUNT_ENDPOINT: Final = "https://a.s2.dev"
CLOUD_BASIN_ENDPOINT: Final = "https://{basin}.b.s2.dev"

AppendRetryPolicyName = Literal["ALL", "NO_SIDE_EFFECTS"]
CompressionName = Literal["none", "zstd", "gzip"]

_BASIN_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")

_Parser = Callable[[str, Any], Any]


def _str(key: str, raw: Any) -> str:
    if not isinstance(raw, str):
        raise ConfigError(f"option {key!r} must be a string, got {type(raw).__name__}")
    return raw


def _scaled(units: dict[str, int], what: str, sign: str = "") -> _Parser:
    """A parser of an int, or digits and one of ``units`` (none: the first), as that many base units."""
    pattern = re.compile(rf"^\s*({sign}\d+)\s*({'|'.join(u for u in units if u)})?\s*$", re.IGNORECASE)

    def parse(key: str, raw: Any) -> int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        m = pattern.match(raw) if isinstance(raw, str) else None
        if m is None:
            raise ConfigError(f"option {key!r} must be {what}, got {raw!r}")
        return int(m.group(1)) * units[(m.group(2) or "").lower()]

    return parse


_int = _scaled({"": 1}, "an integer", sign="-?")
_duration_ms = _scaled(
    {"": 1, "ms": 1, "s": 1000, "sec": 1000, "seconds": 1000, "min": 60_000},
    "a duration in ms (e.g. 500, '500ms', '5s')",
)
_size_bytes = _scaled(
    {"": 1, "b": 1, "kb": 1024, "kib": 1024, "mb": ONE_MIB, "mib": ONE_MIB},
    "a size in bytes (e.g. 1048576, '512kb', '1mib')",
)


def _upper(key: str, raw: Any) -> str:
    """Upper case, ``-`` as ``_`` (``no-side-effects`` is ``NO_SIDE_EFFECTS``); checked on build."""
    return _str(key, raw).strip().upper().replace("-", "_")


def _lower(key: str, raw: Any) -> str:
    return _str(key, raw).strip().lower()


def _opt(
    key: str,
    parse: _Parser,
    lo: int | None = None,
    hi: int | None = None,
    *,
    default: Any = dataclasses.MISSING,
    choices: tuple[str, ...] = (),
    env: str = "",
    secret: bool = False,
) -> Any:
    """A field set by option ``key`` (read by ``parse``), an int within [lo, hi] (None: unbounded) or one of
    ``choices``; ``env`` names the variable that, set and not empty, replaces ``default``; a ``secret`` stays
    out of the repr. `_validate` checks every field by these specs."""
    meta = {"option": key, "parse": parse, "lo": lo, "hi": hi, "choices": choices}
    if env:
        # An empty variable counts as unset, as `export S2_BASIN_ENDPOINT=` usually means "none".
        return field(default_factory=lambda: os.environ.get(env) or default, repr=not secret, metadata=meta)
    return field(default=default, repr=not secret, metadata=meta)


@dataclass(frozen=True, kw_only=True, slots=True)
class S2Config:
    """Where and how to append to S2. Each field names its option (docs/options.md describes them all); the
    token and endpoints not passed are read from the ``S2_*`` variables once, on the driver, and travel to
    executors with the config.

    Example::

        cfg = S2Config(basin="my-basin", stream="events", access_token=token)
        cfg = S2Config.from_options({"s2.basin": "my-basin", "s2.stream": "events", "s2.auth-token": token})
    """

    basin: str = _opt("s2.basin", _str)
    """Basin to write to: 8-48 chars of ``[a-z0-9-]``. Required."""

    stream: str | None = _opt("s2.stream", _str, default=None)
    """Target stream, or the default/prefix for routed writes (``None``: the writer routes every row)."""

    access_token: str = _opt("s2.auth-token", _str, default="", env="S2_ACCESS_TOKEN", secret=True)
    """Bearer token; ``""`` only for loopback endpoints. Never shown in repr, logs or errors."""

    account_endpoint: str = _opt(
        "s2.endpoints.account", _str, default=CLOUD_ACCOUNT_ENDPOINT, env="S2_ACCOUNT_ENDPOINT"
    )
    """Account endpoint origin: where basins are created and listed."""

    basin_endpoint: str = _opt(
        "s2.endpoints.basin", _str, default=CLOUD_BASIN_ENDPOINT, env="S2_BASIN_ENDPOINT"
    )
    """Basin endpoint origin; may contain ``{basin}``."""

    append_retry_policy: AppendRetryPolicyName = _opt(
        "s2.append-retry-policy", _upper, default="ALL", choices=get_args(AppendRetryPolicyName)
    )
    """``ALL`` (retries may duplicate) or ``NO_SIDE_EFFECTS``, which exactly-once delivery always uses."""

    max_retries: int = _opt("s2.max-retries", _int, 0, 100, default=3)
    """The SDK's own retries of one request (append sessions excepted) before the sink's retries take over."""

    retry_delay_ms: int = _opt("s2.retry-delay-ms", _int, 1, 60_000, default=100)
    """First wait of the sink's retries (and the SDK's base delay); waits double up to ``max(2 s, this)``."""

    delivery_timeout_ms: int = _opt("s2.delivery-timeout-ms", _duration_ms, 0, 86_400_000, default=120_000)
    """How long every S2 call of writers and readers keeps retrying failures another attempt may fix, from
    the first failure since it last made progress (Kafka's ``delivery.timeout.ms``); 0 = the SDK's only."""

    batch_max_records: int = _opt("sink.batch.max-size", _int, 1, MAX_BATCH_RECORDS, default=1000)
    """Records per append."""

    flush_buffer_bytes: int = _opt("sink.flush-buffer.size", _size_bytes, 8, ONE_MIB, default=ONE_MIB)
    """Metered bytes per append."""

    flush_timeout_ms: int = _opt("sink.flush-buffer.timeout", _duration_ms, 0, 3_600_000, default=1000)
    """Accepted for the Flink option's sake: a partition's last append is sent when it ends, and appends are
    cut by records and bytes only (deterministic, which exactly-once relies on)."""

    max_buffered_requests: int = _opt("sink.requests.max-buffered", _int, 1, 100_000, default=10_000)
    """Partial appends one task holds across routed streams; beyond it (or ``max_inflight_bytes``), the
    fullest are sent early."""

    max_inflight_requests: int = _opt("sink.requests.max-inflight", _int, 1, 10_000, default=16)
    """Unacknowledged appends one task may have in flight across its streams."""

    max_inflight_bytes: int = _opt(
        "sink.requests.max-inflight-bytes", _size_bytes, ONE_MIB, default=16 * ONE_MIB
    )
    """Unacknowledged metered bytes one task may have in flight; bounds executor memory."""

    request_timeout_ms: int = _opt("s2.request-timeout-ms", _duration_ms, 100, 600_000, default=10_000)
    """Per-request timeout, also the per-append ack deadline."""

    connect_timeout_ms: int = _opt("s2.connect-timeout-ms", _duration_ms, 100, 600_000, default=3000)
    """TCP/TLS connect timeout."""

    compression: CompressionName = _opt(
        "s2.compression", _lower, default="none", choices=get_args(CompressionName)
    )
    """Append frame compression."""

    allow_insecure_http: bool = _opt("s2.allow-insecure-http", parse_bool, default=False)
    """Allow plain ``http://`` to a non-loopback host (the token then travels in clear text)."""

    create_streams: bool = _opt("s2.create-streams", parse_bool, default=False)
    """Create missing target streams before writing to them; ``False``: a missing stream fails the batch."""

    write_parallelism: WriteParallelism = _opt(
        "sink.write-parallelism", parse_write_parallelism, default="auto"
    )
    """Tasks writing a ``foreachBatch`` micro-batch: ``"auto"`` (sized to the batch and cores) or a number."""

    driver_write_max_rows: int = _opt("sink.driver-write.max-rows", _int, 0, default=10_000)
    """A ``foreachBatch`` micro-batch of at most this many rows (and bytes) is written from the driver."""

    driver_write_max_bytes: int = _opt("sink.driver-write.max-bytes", _size_bytes, 0, default=8 * ONE_MIB)
    """...and of at most this many bytes of record frame (Arrow); 0 = never, for either."""

    def __post_init__(self) -> None:
        _validate(self)

    def replace(self, **changes: Any) -> S2Config:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, ignore: Iterable[str] = ()) -> S2Config:
        """A config from Flink-style option names (case-insensitive; values may be strings, as Spark's are).
        Keys in ``ignore`` are skipped; any other unknown key is a ConfigError listing the known ones."""
        opts = OptionMap(options)
        skip = {k.lower() for k in ignore}
        kwargs: dict[str, Any] = {}
        for key, raw in opts.items():
            if key in skip:
                continue
            if key in _REMOVED:
                raise ConfigError(f"option {opts.spelling(key)!r} was removed: {_REMOVED[key]}")
            if key not in _OPTIONS:
                known = ", ".join(sorted(_OPTIONS))
                raise ConfigError(f"unknown option {opts.spelling(key)!r}; known options: {known}")
            kwargs[_OPTIONS[key].name] = _OPTIONS[key].metadata["parse"](key, raw)
        if "basin" not in kwargs:
            raise ConfigError("option 's2.basin' is required")
        return cls(**kwargs)

    @classmethod
    def from_env(cls, *, basin: str, stream: str | None = None, **overrides: Any) -> S2Config:
        """The constructor under the name older examples use."""
        return cls(basin=basin, stream=stream, **overrides)


_OPTIONS: Final[dict[str, dataclasses.Field[Any]]] = {
    f.metadata["option"]: f for f in dataclasses.fields(S2Config)
}
"""Option key -> the S2Config field it sets: the Flink S2 sink's names, and ours (``s2.*``/``sink.*``) for
what the Flink connector lacks."""

_REMOVED: Final[dict[str, str]] = {
    "s2.session-retries": "a failed append session is retried until s2.delivery-timeout-ms passes without "
    "an acknowledgement; set that option instead",
    "sink.session.idle-timeout": "append sessions are no longer pooled between tasks; drop it",
}
"""Options of earlier releases that are gone, refused with why and what to do rather than as unknown."""

OPTION_KEYS: Final[dict[str, str]] = {key: f.name for key, f in _OPTIONS.items()}
"""Option key -> S2Config field name, for every key `S2Config.from_options` accepts."""

WRITE_ONLY_OPTION_KEYS: Final = frozenset(
    {
        "s2.append-retry-policy",
        "s2.create-streams",
        *(key for key in _OPTIONS if key.startswith("sink.")),
    }
)
"""Option keys that shape appends only: a ``format("s2")`` read refuses them rather than ignore them."""


def _bad(name: str, value: object, why: str) -> ConfigError:
    key = S2Config.__dataclass_fields__[name].metadata["option"]
    return ConfigError(f"{name} ({key}) {why}, got {value!r}")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(cfg: S2Config, name: str) -> SplitResult:
    value = getattr(cfg, name)
    if not isinstance(value, str) or not value:
        raise _bad(name, value, "must be a URL such as https://a.s2.dev")
    try:
        parts = urlsplit(value.replace("{basin}", "basin"))
        _ = parts.port
    except ValueError as exc:
        raise _bad(name, value, "is not a valid URL (host or port)") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(name, value, "must be an http(s) origin such as https://a.s2.dev")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise _bad(name, value, "must be an origin without path or query")
    return parts


def _check_endpoints(cfg: S2Config) -> None:
    origins = {name: _origin(cfg, name) for name in ("account_endpoint", "basin_endpoint")}
    remote = [name for name, parts in origins.items() if not _is_loopback(parts.hostname or "")]
    if remote and not cfg.access_token:  # first: a bigger problem than an http:// warning
        endpoints = (cfg.account_endpoint, cfg.basin_endpoint, CLOUD_ACCOUNT_ENDPOINT, CLOUD_BASIN_ENDPOINT)
        raise ConfigError(missing_token(*endpoints))
    for name in remote:
        if origins[name].scheme == "http" and not cfg.allow_insecure_http:
            raise _bad(
                name,
                getattr(cfg, name),
                "uses plain http:// to a non-loopback host; use https:// or set allow_insecure_http=True "
                "(s2.allow-insecure-http) to send the token unencrypted",
            )
    if len({parts.scheme for parts in origins.values()}) != 1:
        raise ConfigError(
            f"account_endpoint and basin_endpoint must use the same scheme, got "
            f"{cfg.account_endpoint!r} and {cfg.basin_endpoint!r}"
        )


def _validate(cfg: S2Config) -> None:
    if not isinstance(cfg.basin, str) or not (8 <= len(cfg.basin) <= 48) or not _BASIN_RE.match(cfg.basin):
        raise _bad(
            "basin", cfg.basin, "must be 8-48 characters of [a-z0-9-], not starting or ending with '-'"
        )
    if cfg.stream is not None:
        if not isinstance(cfg.stream, str):
            raise _bad("stream", cfg.stream, "must be a string")
        problem = stream_name_problem(cfg.stream)
        if problem is not None:
            raise ConfigError(f"stream (s2.stream) {shown(cfg.stream)} {problem}")
    if not isinstance(cfg.access_token, str):
        # Never echo the value: it is a secret.
        raise ConfigError("access_token (s2.auth-token) must be a string")
    _check_endpoints(cfg)
    for f in _OPTIONS.values():
        value, spec = getattr(cfg, f.name), f.metadata
        choices, lo, hi = spec["choices"], spec["lo"], spec["hi"]
        if choices and value not in choices:
            raise _bad(f.name, value, "must be " + " or ".join(map(repr, choices)))
        if spec["parse"] is parse_bool and not isinstance(value, bool):
            raise _bad(f.name, value, "must be a bool")
        if lo is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise _bad(f.name, value, "must be an integer")
        if lo is not None and (value < lo or (hi is not None and value > hi)):
            raise _bad(f.name, value, f"must be >= {lo}" if hi is None else f"must be between {lo} and {hi}")
    parse_write_parallelism("write_parallelism (sink.write-parallelism)", cfg.write_parallelism)
