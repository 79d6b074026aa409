"""The S2Config constructor fills the token and endpoints it is not given from the SDK's variables."""

from __future__ import annotations

import pickle

import pytest

from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

LITE = "http://127.0.0.1:8080"
OTHER = "http://127.0.0.1:9999"


@pytest.fixture
def lite_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables `s2-sink-lite` prints, as a user pastes them."""
    monkeypatch.setenv("S2_ACCOUNT_ENDPOINT", LITE)
    monkeypatch.setenv("S2_BASIN_ENDPOINT", LITE)
    monkeypatch.setenv("S2_ACCESS_TOKEN", "ignored")


@pytest.mark.usefixtures("lite_exports")
def test_constructor_reads_the_exports() -> None:
    """S2Config(basin=..., stream=...) alone points at the endpoints and token of the variables."""
    cfg = S2Config(basin="my-basin", stream="events")
    assert (cfg.account_endpoint, cfg.basin_endpoint, cfg.access_token) == (LITE, LITE, "ignored")


@pytest.mark.usefixtures("lite_exports")
def test_explicit_arguments_win_over_the_variables() -> None:
    """An argument passed to the constructor (or to from_env, or an option) is kept as given."""
    cfg = S2Config(basin="my-basin", account_endpoint=OTHER, basin_endpoint=OTHER, access_token="t")
    assert (cfg.account_endpoint, cfg.basin_endpoint, cfg.access_token) == (OTHER, OTHER, "t")
    env_cfg = S2Config.from_env(basin="my-basin", basin_endpoint=OTHER)
    assert (env_cfg.account_endpoint, env_cfg.basin_endpoint) == (LITE, OTHER)
    opt_cfg = S2Config.from_options({"s2.basin": "my-basin", "s2.endpoints.account": OTHER})
    assert (opt_cfg.account_endpoint, opt_cfg.basin_endpoint) == (OTHER, LITE)


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """`export S2_ACCOUNT_ENDPOINT=` leaves the cloud default, and an empty token is still refused there."""
    for var in ("S2_ACCOUNT_ENDPOINT", "S2_BASIN_ENDPOINT", "S2_ACCESS_TOKEN"):
        monkeypatch.setenv(var, "")
    with pytest.raises(ConfigError, match="S2_ACCESS_TOKEN"):
        S2Config(basin="my-basin")
    cfg = S2Config(basin="my-basin", access_token="t")
    assert cfg.account_endpoint == "https://a.s2.dev"
    assert cfg.basin_endpoint == "https://{basin}.b.s2.dev"


def test_variables_are_read_once_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values travel with the config: an executor without the variables gets the same endpoints."""
    monkeypatch.setenv("S2_ACCOUNT_ENDPOINT", LITE)
    monkeypatch.setenv("S2_BASIN_ENDPOINT", LITE)
    blob = pickle.dumps(S2Config(basin="my-basin"))
    monkeypatch.delenv("S2_ACCOUNT_ENDPOINT")
    monkeypatch.delenv("S2_BASIN_ENDPOINT")
    cfg = pickle.loads(blob)
    assert (cfg.account_endpoint, cfg.basin_endpoint) == (LITE, LITE)
    assert cfg.replace(stream="s").account_endpoint == LITE


def test_no_exports_at_all_says_the_endpoints_fell_back_to_the_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no S2_* variable and no endpoint option, the missing-token error says the endpoints fell back to
    the S2 cloud (naming it) and how to point at a lite server instead."""
    for var in ("S2_ACCOUNT_ENDPOINT", "S2_BASIN_ENDPOINT", "S2_ACCESS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError) as info:
        S2Config.from_options({"s2.basin": "my-basin", "s2.stream": "events"})
    words = str(info.value)
    assert "access_token (s2.auth-token) is required" in words
    assert "the endpoints fell back to the default, the S2 cloud (https://a.s2.dev)" in words
    assert "for a lite server set S2_ACCOUNT_ENDPOINT and S2_BASIN_ENDPOINT" in words


def test_a_configured_endpoint_is_not_called_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint that was configured (here by the variable) is named, and no fallback is claimed."""
    monkeypatch.delenv("S2_ACCESS_TOKEN", raising=False)
    monkeypatch.setenv("S2_ACCOUNT_ENDPOINT", "https://s2.example.com")
    monkeypatch.setenv("S2_BASIN_ENDPOINT", "https://s2.example.com")
    with pytest.raises(ConfigError) as info:
        S2Config(basin="my-basin")
    words = str(info.value)
    assert "(here https://s2.example.com); set it or the S2_ACCESS_TOKEN environment variable" in words
    assert "fell back" not in words


def test_the_missing_token_comes_before_the_http_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-loopback http:// endpoint without a token: the error is the missing token (the http one would
    hide it); with a token, the http:// endpoint is still refused."""
    monkeypatch.delenv("S2_ACCESS_TOKEN", raising=False)
    plain = "http://10.1.2.3:8080"
    with pytest.raises(ConfigError, match=r"access_token \(s2\.auth-token\) is required .*here http://10\.1"):
        S2Config(basin="my-basin", account_endpoint=plain, basin_endpoint=plain)
    with pytest.raises(ConfigError, match="plain http:// to a non-loopback host"):
        S2Config(basin="my-basin", account_endpoint=plain, basin_endpoint=plain, access_token="t")
