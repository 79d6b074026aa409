"""Basins and streams through the official SDK: create, ensure, list, configure, delete, and their errors."""

from __future__ import annotations

import uuid

import pytest
from s2_sdk import (
    BasinConfig,
    EnsureStatus,
    S2ServerError,
    StreamConfig,
    Timestamping,
    TimestampingMode,
)

from s2_sink.lite import LiteServer
from s2_sink.testing import unique_basin_name
from tests.lite._sdk import client, deletion_completes, run


def test_basin_lifecycle_and_provision_results(lite: LiteServer) -> None:
    """create/ensure report created/updated/unchanged, and an ensure sets the basin's config to the one it
    asks for; get/reconfigure round-trip; a basin being deleted still answers its config (S2 does not check
    the deletion there) but refuses to be ensured again (409 basin_deletion_pending), then it is 404.

    As s2-lite: lite/src/backend/basins.rs, provision_basin (ProvisionMode::Ensure replaces the config),
    get_basin_config, delete_basin."""
    name = unique_basin_name("cp")

    async def main() -> None:
        async with client(lite) as s2:
            info = await s2.create_basin(name, config=BasinConfig(create_stream_on_append=True))
            assert info.name == name
            with pytest.raises(S2ServerError) as dup:
                await s2.create_basin(name)
            assert (dup.value.status_code, dup.value.code) == (409, "resource_already_exists")
            same = await s2.ensure_basin(name, config=BasinConfig(create_stream_on_append=True))
            assert same.status == EnsureStatus.CONFIG_UNCHANGED
            changed = await s2.ensure_basin(name, config=BasinConfig(create_stream_on_read=True))
            assert changed.status == EnsureStatus.CONFIG_UPDATED
            cfg = await s2.get_basin_config(name)
            assert cfg.create_stream_on_append is False  # replaced, not patched
            assert cfg.create_stream_on_read is True
            cfg = await s2.reconfigure_basin(name, config=BasinConfig(create_stream_on_append=True))
            assert cfg.create_stream_on_read is True
            assert cfg.create_stream_on_append is True
            await s2.delete_basin(name)
            assert (await s2.get_basin_config(name)).create_stream_on_append is True
            with pytest.raises(S2ServerError) as pending:
                await s2.ensure_basin(name)
            assert (pending.value.status_code, pending.value.code) == (409, "basin_deletion_pending")
            gone = await deletion_completes(lambda: s2.get_basin_config(name), answers_while_pending=True)
            assert gone.code == "basin_not_found"
            await s2.delete_basin(name, ignore_not_found=True)
            created = await s2.ensure_basin(name)
            assert created.status == EnsureStatus.CREATED
            await s2.delete_basin(name)

    run(main())


def test_list_basins_paginates_by_prefix_start_after_and_limit(lite: LiteServer) -> None:
    """list_basins filters by prefix, starts after start_after, caps at limit and sets has_more."""
    prefix = f"pg{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:02d}" for i in range(5)]

    async def main() -> None:
        async with client(lite) as s2:
            for n in reversed(names):
                await s2.create_basin(n)
            page = await s2.list_basins(prefix=prefix, limit=2)
            assert [b.name for b in page.items] == names[:2]
            assert page.has_more
            page = await s2.list_basins(prefix=prefix, start_after=names[1], limit=2)
            assert [b.name for b in page.items] == names[2:4]
            page = await s2.list_basins(prefix=prefix, start_after=names[3])
            assert [b.name for b in page.items] == names[4:]
            assert not page.has_more
            assert [b.name async for b in s2.list_all_basins(prefix=prefix)] == names
            for n in names:
                await s2.delete_basin(n)

    run(main())


def test_stream_lifecycle_with_slash_and_space_names(lite: LiteServer, basin: str) -> None:
    """Streams named with '/', ' ' and '%' are created, listed, configured and deleted by exact name."""
    names = ["a/b c", "a/b%2Fc", "plain"]

    async def main() -> None:
        async with client(lite) as s2:
            b = s2.basin(basin)
            for n in names:
                await b.create_stream(n)
            with pytest.raises(S2ServerError) as dup:
                await b.create_stream("plain")
            assert dup.value.status_code == 409
            page = await b.list_streams()
            assert sorted(s.name for s in page.items) == sorted(names)
            page = await b.list_streams(prefix="a/", limit=1)
            assert [s.name for s in page.items] == ["a/b c"]
            assert page.has_more
            ensured = await b.ensure_stream("a/b c")
            assert ensured.status == EnsureStatus.CONFIG_UNCHANGED
            cfg = StreamConfig(timestamping=Timestamping(mode=TimestampingMode.ARRIVAL))
            ensured = await b.ensure_stream("a/b c", config=cfg)
            assert ensured.status == EnsureStatus.CONFIG_UPDATED
            got = await b.get_stream_config("a/b c")
            assert got.timestamping is not None
            assert got.timestamping.mode == TimestampingMode.ARRIVAL
            assert got.retention_policy == 7 * 24 * 3600
            got = await b.reconfigure_stream("a/b c", config=StreamConfig(retention_policy="infinite"))
            assert got.retention_policy == "infinite"
            assert got.timestamping is not None
            assert got.timestamping.mode == TimestampingMode.ARRIVAL
            await b.delete_stream("a/b%2Fc")
            # Listed with deleted_at while the deletion runs, like S2; gone once it completes.
            deleting = {s.name: s.deleted_at for s in (await b.list_streams()).items}
            assert sorted(deleting) == ["a/b c", "a/b%2Fc", "plain"]
            assert deleting["a/b%2Fc"] is not None
            assert deleting["plain"] is None
            gone = await deletion_completes(lambda: b.get_stream_config("a/b%2Fc"))
            assert gone.code == "stream_not_found"
            assert sorted(s.name for s in (await b.list_streams()).items) == ["a/b c", "plain"]
            await b.delete_stream("a/b%2Fc", ignore_not_found=True)

    run(main())


def test_missing_basin_and_stream_are_404(lite: LiteServer, basin: str) -> None:
    """A data call (check-tail) on a stream of an unknown basin gives basin_not_found, on an unknown stream
    stream_not_found; get-config and delete look the stream up alone (stream_not_found), and listing an
    unknown basin's streams finds none.

    As s2-lite: lite/src/backend/core.rs, stream_handle_with_auto_create (the stream, then the basin);
    streams.rs, get_stream_config, delete_stream_with_condition, list_streams (a key-range scan)."""
    nope = unique_basin_name("nope")

    async def main() -> None:
        async with client(lite) as s2:
            with pytest.raises(S2ServerError) as nb:
                await s2.basin(nope).stream("missing").check_tail()
            assert (nb.value.status_code, nb.value.code) == (404, "basin_not_found")
            for call in (s2.basin(nope).get_stream_config, s2.basin(nope).delete_stream):
                with pytest.raises(S2ServerError) as ns:
                    await call("missing")
                assert (ns.value.status_code, ns.value.code) == (404, "stream_not_found")
            page = await s2.basin(nope).list_streams()
            assert (page.items, page.has_more) == ([], False)
            with pytest.raises(S2ServerError) as ns:
                await s2.basin(basin).stream("missing").check_tail()
            assert (ns.value.status_code, ns.value.code) == (404, "stream_not_found")

    run(main())


def test_default_stream_config_applies_to_new_streams(lite: LiteServer) -> None:
    """A basin's default_stream_config is the starting config of streams created in it."""
    name = unique_basin_name("dc")

    async def main() -> None:
        async with client(lite) as s2:
            cfg = BasinConfig(
                default_stream_config=StreamConfig(
                    timestamping=Timestamping(mode=TimestampingMode.CLIENT_REQUIRE), retention_policy=3600
                )
            )
            await s2.create_basin(name, config=cfg)
            b = s2.basin(name)
            await b.create_stream("s")
            got = await b.get_stream_config("s")
            assert got.retention_policy == 3600
            assert got.timestamping is not None
            assert got.timestamping.mode == TimestampingMode.CLIENT_REQUIRE
            await s2.delete_basin(name)

    run(main())
