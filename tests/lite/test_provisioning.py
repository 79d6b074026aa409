"""Create, ensure and reconfigure as the official s2-lite answers them, names and listings included.

Each test names the s2-lite source it follows (the ``s2-streamstore/s2`` repository: ``lite/src/backend``,
``lite/src/handlers/v1``, ``common/src``, ``api/src``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin, unique_basin_name


@pytest.fixture
def http(lite: LiteServer) -> Iterator[httpx.Client]:
    """An HTTP/1.1 client for the session server."""
    with httpx.Client(base_url=lite.endpoint, timeout=10.0) as c:
        yield c


def _config(http: httpx.Client, basin: str, stream: str) -> Any:
    resp = http.get(f"/v1/streams/{stream}", headers={"s2-basin": basin})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_ensure_sets_the_config_it_asks_for_merged_with_the_basin_defaults(http: httpx.Client) -> None:
    """PUT on an existing stream replaces its config with the one asked for merged with the basin's defaults
    (``updated``): fields not asked for go back to the defaults, so a PUT without a body resets a configured
    stream; asking for the config it has (however spelled) is ``noop``. POST on it is 409 and changes nothing.

    As s2-lite: lite/src/backend/streams.rs, provision_stream (ProvisionMode::Ensure: ``config.merge(basin
    defaults)``, Noop when equal, else Updated); common/src/config.rs, OptionalStreamConfig::merge."""
    basin = fresh_basin(str(http.base_url), default_stream_config={"retention_policy": {"age": 3600}})
    h = {"s2-basin": basin}
    kept = {"retention_policy": {"infinite": {}}, "timestamping": {"mode": "arrival"}}
    resp = http.post("/v1/streams", headers=h, json={"stream": "s", "config": kept})
    assert (resp.status_code, resp.headers["s2-provision-result"]) == (201, "created")
    assert _config(http, basin, "s") == {
        "storage_class": "express",
        "retention_policy": {"infinite": {}},
        "timestamping": {"mode": "arrival", "uncapped": False},
        "delete_on_empty": {"min_age_secs": 0},
    }
    again = http.post("/v1/streams", headers=h, json={"stream": "s", "config": {"storage_class": "standard"}})
    assert (again.status_code, again.json()["code"]) == (409, "resource_already_exists")
    same = http.put("/v1/streams/s", headers=h, json={**kept, "storage_class": "express"})
    assert (same.status_code, same.headers["s2-provision-result"]) == (200, "noop")
    assert _config(http, basin, "s")["retention_policy"] == {"infinite": {}}

    reset = http.put("/v1/streams/s", headers=h)  # no body: the basin defaults, then the system's
    assert (reset.status_code, reset.headers["s2-provision-result"]) == (200, "updated")
    assert _config(http, basin, "s") == {
        "storage_class": "express",
        "retention_policy": {"age": 3600},
        "timestamping": {"mode": "client-prefer", "uncapped": False},
        "delete_on_empty": {"min_age_secs": 0},
    }
    partial = http.put("/v1/streams/s", headers=h, json={"timestamping": {"uncapped": True}})
    assert partial.headers["s2-provision-result"] == "updated"
    assert _config(http, basin, "s")["timestamping"] == {"mode": "client-prefer", "uncapped": True}


def test_reconfigure_changes_the_fields_given_and_a_null_takes_the_basin_default(http: httpx.Client) -> None:
    """PATCH changes only the fields it names; a field given as null falls back to the basin's default (then
    the system's), also nested ones; unknown fields are ignored, as S2's deserializers ignore them.

    As s2-lite: lite/src/backend/streams.rs, reconfigure_stream (``reconfigure(..).merge(basin defaults)``);
    common/src/config.rs, OptionalStreamConfig::reconfigure; common/src/maybe.rs (null is Specified(None))."""
    defaults = {"storage_class": "standard", "timestamping": {"mode": "arrival"}}
    basin = fresh_basin(str(http.base_url), default_stream_config=defaults)
    h = {"s2-basin": basin}
    config = {
        "storage_class": "express",
        "retention_policy": {"age": 60},
        "timestamping": {"mode": "client-require", "uncapped": True},
        "delete_on_empty": {"min_age_secs": 30},
        "not_a_field": 1,
    }
    assert http.post("/v1/streams", headers=h, json={"stream": "s", "config": config}).status_code == 201
    resp = http.patch("/v1/streams/s", headers=h, json={"retention_policy": {"age": 120}})
    assert resp.json()["timestamping"] == {"mode": "client-require", "uncapped": True}
    assert resp.json()["retention_policy"] == {"age": 120}
    patch = {"storage_class": None, "timestamping": {"mode": None}, "delete_on_empty": None, "nope": {}}
    resp = http.patch("/v1/streams/s", headers=h, json=patch)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {
        "storage_class": "standard",
        "retention_policy": {"age": 120},
        "timestamping": {"mode": "arrival", "uncapped": True},
        "delete_on_empty": {"min_age_secs": 0},
    }
    assert _config(http, basin, "s") == resp.json()
    zero = http.patch("/v1/streams/s", headers=h, json={"retention_policy": {"age": 0}})
    assert (zero.status_code, zero.json()["code"]) == (422, "invalid")


def test_a_basin_config_shows_the_stream_defaults_it_sets(http: httpx.Client) -> None:
    """A basin's config answers its default stream config as given (the fields set, others null; null when
    none is), and PUT on an existing basin replaces its whole config.

    As s2-lite: api/src/v1/config.rs, BasinConfig from s2_common (``StreamConfig::to_opt``); basins.rs,
    provision_basin."""
    name = unique_basin_name("cfg")
    doc = {"basin": name, "config": {"default_stream_config": {"retention_policy": {"age": 10}}}}
    assert http.post("/v1/basins", json=doc).status_code == 201
    got = http.get(f"/v1/basins/{name}").json()
    assert got["default_stream_config"] == {
        "storage_class": None,
        "retention_policy": {"age": 10},
        "timestamping": None,
        "delete_on_empty": None,
    }
    assert (got["create_stream_on_append"], got["create_stream_on_read"]) == (False, False)
    resp = http.put(f"/v1/basins/{name}", json={"config": {"create_stream_on_read": True}})
    assert resp.headers["s2-provision-result"] == "updated"
    got = http.get(f"/v1/basins/{name}").json()
    assert (got["default_stream_config"], got["create_stream_on_read"]) == (None, True)
    patch = {"default_stream_config": {"timestamping": {"uncapped": True}}}
    got = http.patch(f"/v1/basins/{name}", json=patch).json()
    assert got["default_stream_config"]["timestamping"] == {"mode": None, "uncapped": True}
    assert http.delete(f"/v1/basins/{name}").status_code == 202


def test_json_bodies_need_a_json_content_type(http: httpx.Client, basin: str) -> None:
    """A JSON body must be sent as application/json (else 400 bad_json); an ensure may send none at all.

    As s2-lite: api/src/data.rs, ``Json`` / ``JsonOpt`` extraction (MissingContentType)."""
    h = {"s2-basin": basin}
    form = {"content-type": "application/x-www-form-urlencoded"}
    for resp in (
        http.post("/v1/streams", headers={**h, **form}, content=b'{"stream": "s"}'),
        http.put("/v1/streams/s", headers={**h, **form}, content=b"{}"),
        http.post("/v1/streams/s/records", headers=h, content=b'{"records": [{"body": "x"}]}'),
    ):
        assert (resp.status_code, resp.json()["code"]) == (400, "bad_json")
    assert http.put("/v1/streams/s", headers=h).status_code == 201


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (("POST", "/v1/basins", {}, {"basin": "Bad_Name"}), "bad_json"),
        (("POST", "/v1/basins", {}, {"basin": "short"}), "bad_json"),
        (("PUT", "/v1/basins/ends-with-dash-", {}, None), "bad_path"),
        (("GET", "/v1/streams/s/records/tail", {"s2-basin": "UPPER-case"}, None), "bad_header"),
        (("GET", "/v1/streams/s", {}, None), "bad_header"),
        (("POST", "/v1/streams", {}, {"stream": ".."}), "bad_json"),
        (("GET", "/v1/streams/%2E", {}, None), "bad_path"),
        (("GET", "/v1/streams/" + "n" * 513, {}, None), "bad_path"),
        (("GET", "/v1/streams", {}, "prefix=" + "p" * 513), "bad_query"),
        (("GET", "/v1/basins", {}, "prefix=-x"), "bad_query"),
        (("POST", "/v1/streams", {"s2-request-token": "t" * 37}, {"stream": "s"}), "bad_header"),
    ],
)
def test_bad_names_are_refused_where_they_were_read(
    http: httpx.Client, basin: str, request_: tuple[str, str, dict[str, str], Any], code: str
) -> None:
    """A basin name (8-48 bytes of [a-z0-9-], beginning and ending with a letter or digit), a stream name
    (1-512 bytes, not "." or "..") or a request token (36 bytes at most) that breaks the rules is a 400 whose
    code names where it was read: bad_json, bad_path, bad_header or bad_query.

    As s2-lite: common/src/basin.rs, common/src/stream.rs (validate_str), common/src/caps.rs,
    common/src/resources.rs (RequestToken); lite/src/handlers/v1/error.rs (the rejections' codes)."""
    method, path, headers, body = request_
    hdrs = {"s2-basin": basin, **headers} if path.startswith("/v1/streams") else headers
    if method == "GET" and path == "/v1/streams/s" and not headers:
        hdrs = {}
    kwargs: dict[str, Any] = {"headers": hdrs}
    if isinstance(body, str):
        path = f"{path}?{body}"
    elif body is not None:
        kwargs["json"] = body
    resp = http.request(method, path, **kwargs)
    assert (resp.status_code, resp.json()["code"]) == (400, code), resp.text


def test_stream_names_are_bytes_not_rules(http: httpx.Client, basin: str) -> None:
    """Any UTF-8 of 1-512 bytes names a stream, a NUL or a dot included; 512 bytes is the longest."""
    h = {"s2-basin": basin}
    for name in ("a\x00b", ".hidden", "...", "é" * 256):
        resp = http.post("/v1/streams", headers=h, json={"stream": name})
        assert resp.status_code == 201, (name, resp.text)


def test_listing_pages_through_more_than_a_thousand_streams(http: httpx.Client, basin: str) -> None:
    """Listings come in byte order, at most 1000 to a page (a limit of 0 or over 1000 is 1000) with
    has_more; start_after resumes after a name, and one that sorts before the prefix just starts at it.

    As s2-lite: common/src/resources.rs (ListLimit: 1..=1000, else the default 1000);
    lite/src/backend/kv/stream_meta.rs, ser_key_range (max of the prefix and start_after)."""
    h = {"s2-basin": basin}
    names = [f"p/{i:04d}" for i in range(1203)]
    for name in names:
        assert http.put(f"/v1/streams/{name.replace('/', '%2F')}", headers=h).status_code == 201
    http.put("/v1/streams/q", headers=h)
    seen: list[str] = []
    start_after = "a"  # before the prefix
    while True:
        params = {"prefix": "p/", "start_after": start_after, "limit": 0}
        page = http.get("/v1/streams", headers=h, params=params).json()
        seen += [s["name"] for s in page["streams"]]
        if not page["has_more"]:
            break
        assert len(page["streams"]) == 1000
        start_after = seen[-1]
    assert seen == names
    page = http.get("/v1/streams", headers=h, params={"limit": 5000}).json()
    assert (len(page["streams"]), page["has_more"]) == (1000, True)


def test_the_differences_docs_lite_md_lists(http: httpx.Client) -> None:
    """What docs/lite.md says still differs from s2-lite, where a client can check it: an unknown path is a
    JSON 404 ``not_found`` and a known one with another method a 405 ``bad_path`` (s2-lite answers both with
    an empty body); ``/metrics`` is not served; a basin's ``stream_cipher`` is kept and shown, and a stream
    created in it names it (records are not encrypted)."""
    resp = http.get("/v1/nothing-here")
    assert (resp.status_code, resp.json()["code"]) == (404, "not_found")
    resp = http.delete("/v1/basins")
    assert (resp.status_code, resp.json()["code"]) == (405, "bad_path")
    assert http.get("/metrics").status_code == 404
    name = unique_basin_name("ciph")
    doc = {"basin": name, "config": {"stream_cipher": "aegis-256"}}
    assert http.post("/v1/basins", json=doc).status_code == 201
    assert http.get(f"/v1/basins/{name}").json()["stream_cipher"] == "aegis-256"
    made = http.post("/v1/streams", headers={"s2-basin": name}, json={"stream": "s"})
    assert made.json()["cipher"] == "aegis-256"
    assert http.delete(f"/v1/basins/{name}").status_code == 202
