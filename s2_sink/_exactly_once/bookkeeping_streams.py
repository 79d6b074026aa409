"""The exactly-once ledgers this process has already created or found.

A format("s2") driver runs in a long-lived Python worker and opens its ledger once per micro-batch; the
create-if-missing call is needed once per process, not once per batch. (Sign-in registers are created by
the first task that finds one missing, `sign_in_registers`.)
"""

from __future__ import annotations

from s2_sdk import S2Basin, StreamConfig

from s2_sink._transport.runtime import create_if_missing

__all__ = ["ensure_once", "forget_all"]

_known: set[tuple[str, str]] = set()


async def ensure_once(basin: S2Basin, name: str, config: StreamConfig) -> None:
    """Create `name` with `config` unless this process already created or found it; one that exists keeps
    its config (`create_if_missing`: an ensure would reset what an operator changed)."""
    key = (basin.name, name)
    if key not in _known:
        await create_if_missing(basin, name, config)
        _known.add(key)


def forget_all() -> None:
    """Forget every stream, as a fresh process would."""
    _known.clear()
