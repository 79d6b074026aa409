"""What a writer's configuration makes of a row, as the ledger records it, and what a restart may change.

See docs/exactly-once.md, *Changing the writer between runs*.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from s2_sink.errors import ConfigError

__all__ = ["NO_ENCODER", "WriteShape", "check_restart", "describe_encoder", "shapes_of"]

log = logging.getLogger(__name__)

NO_ENCODER: Final = "none (the batches are record frames)"
_MAX_TEXT: Final = 300
"""A setting's recorded text is at most this long (a longer one is cut and keeps a digest of the whole)."""


def _short(text: str) -> str:
    if len(text) <= _MAX_TEXT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{text[: _MAX_TEXT - 24]}...#{digest}"


def describe_encoder(encoder: object | None) -> str:
    """The encoder's class and settings as text: equal text, equal records for equal rows. The settings are
    its constructor's arguments as it keeps them (not what it caches), else its public attributes."""
    if encoder is None:
        return NO_ENCODER
    names = [n for n in inspect.signature(type(encoder).__init__).parameters if n != "self"]
    kept = vars(encoder)
    settings = sorted((n, kept[n]) for n in names if n in kept) or sorted(
        (k, v) for k, v in kept.items() if not k.startswith("_")
    )
    return _short(f"{type(encoder).__name__}({', '.join(f'{k}={v!r}' for k, v in settings)})")


@dataclass(frozen=True, slots=True)
class WriteShape:
    """The settings that decide which records a row becomes and which streams they go to."""

    encoder: str
    """`describe_encoder` of the encoder."""
    routing: str
    """The routing rule: ``stream=S``, ``column=C``, ``template=T`` or ``shards=NxS``."""
    on_error: str
    dlq: str | None
    names: tuple[str, str, str, str] = field(
        default=("encoder", "routing (stream_column, shards, S2Config.stream)", "on_error", "dlq_stream"),
        compare=False,
    )
    """How the front door spells the four settings in messages (not recorded)."""

    def as_doc(self) -> dict[str, Any]:
        return dict(zip(("encoder", "routing", "on_error", "dlq"), self.values(), strict=True))

    def values(self) -> tuple[str, str, str, str | None]:
        return (self.encoder, self.routing, self.on_error, self.dlq)

    @classmethod
    def of_doc(cls, doc: Any) -> WriteShape:
        if not isinstance(doc, dict):
            raise ValueError(f"a write shape is an object, got {doc!r}")
        dlq = doc.get("dlq")
        return cls(
            str(doc["encoder"]), str(doc["routing"]), str(doc["on_error"]), None if dlq is None else str(dlq)
        )

    def differences(self, new: WriteShape) -> list[tuple[str, str | None, str | None]]:
        """``(setting, old value, new value)`` for every setting `new` changes, in `new`'s spelling."""
        pairs = zip(new.names, self.values(), new.values(), strict=True)
        return [(name, old, now) for name, old, now in pairs if old != now]


def shapes_of(
    shapes: tuple[WriteShape, ...], new: WriteShape | None, *, committed: bool
) -> tuple[WriteShape, ...]:
    """The shapes a state record carries: after a ``commit`` only the committing one (nothing is in flight),
    else every shape since the last commit with `new` last (each once)."""
    if new is None:
        return shapes
    if committed:
        return (new,)
    return (*(s for s in shapes if s != new), new)


def check_restart(
    shapes: tuple[WriteShape, ...],
    new: WriteShape,
    *,
    at: int,
    in_flight: int | None,
    writer_id: str,
    said: list[str] | None = None,
) -> list[str]:
    """Decide a restart's change of configuration at micro-batch `at`: ConfigError, or the changes as text,
    logged unless they are `said` (logged already).

    `shapes` are those the ledger recorded since its last commit (the last one the current), `in_flight`
    the micro-batch that may be part written under them (None: nothing in flight for this micro-batch)."""
    if not shapes:
        return []  # a ledger of a version that recorded no configuration: nothing to compare
    changes = [f"{name} {old!r} -> {now!r}" for name, old, now in shapes[-1].differences(new)]
    for old in shapes if in_flight is not None else ():
        refused = _refused(old, new)
        if refused is not None:
            name, before, now = refused
            raise ConfigError(
                f"exactly-once: writer_id {writer_id!r} has micro-batch {in_flight} in flight (announced in "
                f"its ledger and not committed, so part of it may be written) under {name} {before!r}, and "
                f"this run would write it under {name} {now!r}: the rows already written became other "
                "records, or went to other streams, than the replay would read back, so they would be "
                f"written twice. Restart once with {name} {before!r} so micro-batch {in_flight} finishes "
                "exactly once, then change it (a change between micro-batches is safe)"
            )
    if changes and changes != said:  # said only once the restart is allowed to go on
        log.warning(
            "exactly-once: writer %s goes on from its ledger at micro-batch %s under a changed configuration "
            "(%s)%s",
            writer_id,
            at,
            "; ".join(changes),
            f"; micro-batch {in_flight} in flight is recovered" if in_flight is not None else "",
        )
    return changes


def _refused(old: WriteShape, new: WriteShape) -> tuple[str, str | None, str | None] | None:
    """The first change of `old` to `new` that a replay cannot recover: the encoder, the routing, or another
    dead-letter stream where the old one may hold the batch's dead letters."""
    enc, route, _, dlq = new.names
    if old.encoder != new.encoder:
        return enc, old.encoder, new.encoder
    if old.routing != new.routing:
        return route, old.routing, new.routing
    if old.dlq is not None and new.dlq is not None and old.dlq != new.dlq:
        return dlq, old.dlq, new.dlq
    return None
