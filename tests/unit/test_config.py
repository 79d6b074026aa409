"""S2Config: defaults, Flink option names, environment, validation messages, secrecy, pickling."""

from __future__ import annotations

import pickle

import pytest

from s2_sink.config import OPTION_KEYS, S2Config
from s2_sink.errors import ConfigError

TOKEN = "s3cr3t-token-value"
LOCAL = "http://127.0.0.1:8080"


def local(**kw: object) -> S2Config:
    base: dict[str, object] = {
        "basin": "test-basin",
        "stream": "events",
        "access_token": TOKEN,
        "account_endpoint": LOCAL,
        "basin_endpoint": LOCAL,
    }
    base.update(kw)
    return S2Config(**base)  # type: ignore[arg-type]


def test_defaults_point_at_the_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without endpoints (arguments or variables) the config targets the S2 cloud and uses the defaults."""
    monkeypatch.delenv("S2_ACCOUNT_ENDPOINT", raising=False)
    monkeypatch.delenv("S2_BASIN_ENDPOINT", raising=False)
    cfg = S2Config(basin="my-basin-1", stream="s", access_token=TOKEN)
    assert cfg.account_endpoint == "https://a.s2.dev"
    assert cfg.basin_endpoint == "https://{basin}.b.s2.dev"
    assert cfg.batch_max_records == 1000
    assert cfg.flush_buffer_bytes == 1024 * 1024
    assert cfg.append_retry_policy == "ALL"
    assert cfg.create_streams is False


def test_keyword_only_and_frozen() -> None:
    """Positional construction and mutation are refused."""
    with pytest.raises(TypeError):
        S2Config("my-basin-1")  # type: ignore[misc]
    cfg = local()
    with pytest.raises(AttributeError):
        cfg.basin = "other-basin"  # type: ignore[misc]


def test_token_never_in_repr_or_str() -> None:
    """The access token is absent from repr() and str()."""
    cfg = local()
    assert TOKEN not in repr(cfg)
    assert TOKEN not in str(cfg)
    assert "test-basin" in repr(cfg)


def test_the_client_pool_keys_clients_by_a_hash_of_the_token() -> None:
    """The pool keeps its keys for the process: they hold a hash of the token, never the token, and
    tell two tokens apart."""
    from s2_sink._transport.runtime import _ClientKey

    key = _ClientKey.of(local())
    assert TOKEN not in repr(key)
    assert _ClientKey.of(local().replace(access_token="another-token")) != key


def test_pickles_round_trip() -> None:
    """The config pickles (it is shipped to executors) and stays equal, token included."""
    cfg = local(compression="zstd", create_streams=True)
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg
    assert back.access_token == TOKEN


def test_from_options_flink_names() -> None:
    """Every Flink sink option name maps to its field; string values are parsed."""
    cfg = S2Config.from_options(
        {
            "s2.basin": "test-basin",
            "s2.stream": "events",
            "s2.auth-token": TOKEN,
            "s2.append-retry-policy": "NO_SIDE_EFFECTS",
            "s2.endpoints.account": LOCAL,
            "s2.endpoints.basin": LOCAL,
            "s2.max-retries": "5",
            "s2.retry-delay-ms": "250",
            "sink.batch.max-size": "500",
            "sink.flush-buffer.size": "512kb",
            "sink.flush-buffer.timeout": "2s",
            "sink.requests.max-buffered": "10",
            "sink.requests.max-inflight": "4",
        }
    )
    assert cfg.basin == "test-basin"
    assert cfg.stream == "events"
    assert cfg.access_token == TOKEN
    assert cfg.append_retry_policy == "NO_SIDE_EFFECTS"
    assert cfg.max_retries == 5
    assert cfg.retry_delay_ms == 250
    assert cfg.batch_max_records == 500
    assert cfg.flush_buffer_bytes == 512 * 1024
    assert cfg.flush_timeout_ms == 2000
    assert cfg.max_buffered_requests == 10
    assert cfg.max_inflight_requests == 4


def test_from_options_own_keys() -> None:
    """Our own option keys parse booleans, sizes and durations."""
    cfg = S2Config.from_options(
        {
            "s2.basin": "test-basin",
            "s2.endpoints.account": LOCAL,
            "s2.endpoints.basin": LOCAL,
            "s2.compression": "ZSTD",
            "s2.create-streams": "true",
            "s2.allow-insecure-http": "false",
            "s2.delivery-timeout-ms": "2min",
            "s2.request-timeout-ms": "1500ms",
            "s2.connect-timeout-ms": 700,
            "sink.requests.max-inflight-bytes": "4mib",
        }
    )
    assert cfg.compression == "zstd"
    assert cfg.create_streams is True
    assert cfg.delivery_timeout_ms == 120_000
    assert cfg.request_timeout_ms == 1500
    assert cfg.connect_timeout_ms == 700
    assert cfg.max_inflight_bytes == 4 * 1024 * 1024


def test_option_keys_cover_every_field() -> None:
    """Each S2Config field can be set through exactly one option key."""
    fields = set(S2Config.__dataclass_fields__)
    assert set(OPTION_KEYS.values()) == fields
    assert len(OPTION_KEYS) == len(fields)


def test_from_options_unknown_key() -> None:
    """An unknown option key is an error naming the key."""
    with pytest.raises(ConfigError, match=r"'s2\.bsain'"):
        S2Config.from_options({"s2.basin": "test-basin", "s2.bsain": "x"})


@pytest.mark.parametrize("key", ["sink.session.idle-timeout", "Sink.Session.Idle-Timeout"])
def test_a_removed_option_says_so(key: str) -> None:
    """An option of an earlier release that is gone names itself, says it was removed and why, and asks to
    drop it, rather than being an unknown option."""
    with pytest.raises(ConfigError, match=rf"option '{key}' was removed: .*; drop it"):
        S2Config.from_options({"s2.basin": "test-basin", key: "true"})


def test_from_options_names_are_case_insensitive() -> None:
    """Option names match in any case (as Spark's own options do); the value is parsed as usual."""
    cfg = S2Config.from_options(
        {
            "S2.Basin": "test-basin",
            "S2.ENDPOINTS.ACCOUNT": LOCAL,
            "s2.endpoints.Basin": LOCAL,
            "Sink.Batch.Max-Size": "10",
            "s2.streams": "a,b",
        },
        ignore=["S2.Streams"],
    )
    assert (cfg.basin, cfg.batch_max_records) == ("test-basin", 10)


def test_from_options_refuses_two_spellings_of_one_name() -> None:
    """Two spellings of one option are refused rather than one silently winning."""
    with pytest.raises(ConfigError, match=r"'S2\.Basin' is given twice \(as 's2\.basin' too\)"):
        S2Config.from_options({"s2.basin": "test-basin", "S2.Basin": "other-basin"})


def test_from_options_ignore_skips_foreign_keys() -> None:
    """Keys passed in `ignore` (another component's options) are skipped."""
    cfg = S2Config.from_options(
        {"s2.basin": "test-basin", "s2.endpoints.account": LOCAL, "s2.endpoints.basin": LOCAL, "path": "x"},
        ignore=["path"],
    )
    assert cfg.basin == "test-basin"


def test_from_options_requires_basin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing s2.basin is an error naming the option."""
    monkeypatch.delenv("S2_ACCESS_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"s2\.basin"):
        S2Config.from_options({"s2.stream": "x"})


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("sink.batch.max-size", "1001", r"sink\.batch\.max-size.*1001"),
        ("sink.batch.max-size", "0", r"sink\.batch\.max-size.*0"),
        ("sink.batch.max-size", "many", r"sink\.batch\.max-size.*'many'"),
        ("sink.flush-buffer.size", str(1024 * 1024 + 1), r"sink\.flush-buffer\.size.*1048577"),
        ("sink.flush-buffer.timeout", "soon", r"sink\.flush-buffer\.timeout.*'soon'"),
        ("s2.append-retry-policy", "SOME", r"s2\.append-retry-policy.*'SOME'"),
        ("s2.max-retries", "-1", r"s2\.max-retries.*-1"),
        ("s2.max-retries", "--5", r"s2\.max-retries.*'--5'"),
        ("sink.batch.max-size", "\u00b2", r"sink\.batch\.max-size.*'\u00b2'"),
        ("s2.delivery-timeout-ms", "-5", r"s2\.delivery-timeout-ms.*'-5'"),
        ("s2.delivery-timeout-ms", "2 days", r"s2\.delivery-timeout-ms.*'2 days'"),
        (
            "s2.delivery-timeout-ms",
            str(86_400_001),
            r"delivery_timeout_ms \(s2\.delivery-timeout-ms\).*86400001",
        ),
        ("sink.requests.max-inflight", "0", r"sink\.requests\.max-inflight.*0"),
        ("s2.compression", "lz4", r"s2\.compression.*'lz4'"),
        ("s2.create-streams", "maybe", r"s2\.create-streams.*'maybe'"),
        ("sink.requests.max-inflight-bytes", "1000", r"sink\.requests\.max-inflight-bytes.*1000"),
    ],
)
def test_bad_values_name_option_and_value(key: str, value: str, pattern: str) -> None:
    """A bad option value raises ConfigError naming the option and the value."""
    opts = {"s2.basin": "test-basin", "s2.endpoints.account": LOCAL, "s2.endpoints.basin": LOCAL, key: value}
    with pytest.raises(ConfigError, match=pattern):
        S2Config.from_options(opts)


def test_the_removed_session_retries_option_names_what_replaces_it() -> None:
    """s2.session-retries (append sessions were retried that many times more) is refused with the option
    that now bounds those retries, the delivery deadline."""
    opts = {"s2.basin": "test-basin", "s2.endpoints.account": LOCAL, "s2.endpoints.basin": LOCAL}
    with pytest.raises(
        ConfigError, match=r"option 's2\.Session-Retries' was removed: .*s2\.delivery-timeout-ms"
    ):
        S2Config.from_options({**opts, "s2.Session-Retries": "2"})


@pytest.mark.parametrize("basin", ["short", "Upper-Case-Basin", "-leading-dash", "x" * 49, "has_underscore"])
def test_bad_basin_names(basin: str) -> None:
    """Basin names outside 8-48 chars of [a-z0-9-] are refused, naming the value."""
    with pytest.raises(ConfigError, match="basin"):
        local(basin=basin)


def test_bad_stream_name() -> None:
    """An empty or NUL-containing stream name is refused."""
    with pytest.raises(ConfigError, match="stream"):
        local(stream="")
    with pytest.raises(ConfigError, match="stream"):
        local(stream="a\0b")


def test_plain_http_refused_for_remote_hosts() -> None:
    """http:// to a non-loopback host needs an explicit opt-in; the message names the option."""
    with pytest.raises(ConfigError, match=r"s2\.allow-insecure-http"):
        local(account_endpoint="http://s2.internal:80", basin_endpoint="http://s2.internal:80")
    cfg = local(
        account_endpoint="http://s2.internal:80",
        basin_endpoint="http://s2.internal:80",
        allow_insecure_http=True,
    )
    assert cfg.allow_insecure_http


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.0.0.5", "[::1]"])
def test_plain_http_allowed_for_loopback(host: str) -> None:
    """Loopback hosts may use plain http:// without opting in."""
    url = f"http://{host}:9000"
    assert local(account_endpoint=url, basin_endpoint=url).basin_endpoint == url


def test_endpoint_shape_errors() -> None:
    """Endpoints must be bare origins of one scheme."""
    with pytest.raises(ConfigError, match="without path"):
        local(account_endpoint="http://127.0.0.1:1/v1")
    with pytest.raises(ConfigError, match="same scheme"):
        local(account_endpoint="https://a.s2.dev")
    with pytest.raises(ConfigError, match="origin"):
        local(basin_endpoint="ftp://127.0.0.1")


def test_token_required_for_remote_and_not_echoed() -> None:
    """A missing token is an error for remote endpoints; a bad token type is reported without its value."""
    with pytest.raises(ConfigError, match="access_token"):
        S2Config(basin="my-basin-1", stream="s")
    assert local(access_token="").access_token == ""
    with pytest.raises(ConfigError) as info:
        local(access_token=12345)
    assert "12345" not in str(info.value)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """from_env reads the token and both endpoints from the SDK's variables."""
    monkeypatch.setenv("S2_ACCESS_TOKEN", TOKEN)
    monkeypatch.setenv("S2_ACCOUNT_ENDPOINT", LOCAL)
    monkeypatch.setenv("S2_BASIN_ENDPOINT", LOCAL)
    cfg = S2Config.from_env(basin="test-basin", stream="events", create_streams=True)
    assert cfg.access_token == TOKEN
    assert cfg.account_endpoint == LOCAL
    assert cfg.basin_endpoint == LOCAL
    assert cfg.create_streams


def test_from_env_defaults_to_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without endpoint variables, from_env keeps the cloud endpoints."""
    monkeypatch.setenv("S2_ACCESS_TOKEN", TOKEN)
    monkeypatch.delenv("S2_ACCOUNT_ENDPOINT", raising=False)
    monkeypatch.delenv("S2_BASIN_ENDPOINT", raising=False)
    cfg = S2Config.from_env(basin="test-basin")
    assert cfg.account_endpoint == "https://a.s2.dev"


def test_replace_revalidates() -> None:
    """replace() returns a validated copy."""
    cfg = local()
    assert cfg.replace(batch_max_records=10).batch_max_records == 10
    with pytest.raises(ConfigError, match="batch_max_records"):
        cfg.replace(batch_max_records=2000)


def test_both_front_doors_and_reads_take_the_delivery_deadline() -> None:
    """S2Config.delivery_timeout_ms is option s2.delivery-timeout-ms for format("s2") reads and writes alike
    (a read does not refuse it as a write option); the default is Kafka's two minutes."""
    from s2_sink.datasource._source import read_config  # loads pyspark: only this test needs it

    opts = {"s2.basin": "test-basin", "s2.endpoints.account": LOCAL, "s2.endpoints.basin": LOCAL}
    assert S2Config.from_options(opts).delivery_timeout_ms == 120_000
    assert S2Config.from_options({**opts, "S2.Delivery-Timeout-Ms": "5s"}).delivery_timeout_ms == 5000
    assert read_config({**opts, "s2.stream": "s", "s2.delivery-timeout-ms": "0"}).delivery_timeout_ms == 0
