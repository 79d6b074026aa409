"""What a writer's configuration makes of a row, as the ledger records it, and what a restart may change
(docs/exactly-once.md, *Changing the writer between runs*)."""

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
_MAX_TEXT: Final = 300  # a longer setting is cut and keeps a digest of the whole


def _short(text: str) -> str:
    if len(text) <= _MAX_TEXT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{text[: _MAX_TEXT - 24]}...#{digest}"


def describe_encoder(encoder: object | None) -> str:
    """The encoder's class and settings (its constructor's arguments as kept, else its public attributes):
    equal text, equal records for equal rows."""
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

    encoder: str  # `describe_encoder`
    routing: str  # stream=S, column=C, template=T or shards=NxS
    on_error: str
    dlq: str | None
    names: tuple[str, str, str, str] = field(  # the front door's spelling of the four (not recorded)
        default=("encoder", "routing (stream_column, shards, S2Config.stream)", "on_error", "dlq_stream"),
        compare=False,
    )

    def as_doc(self) -> dict[str, Any]:
        return {"encoder": self.encoder, "routing": self.routing, "on_error": self.on_error, "dlq": self.dlq}

    @classmethod
    def of_doc(cls, doc: Any) -> WriteShape:
        if not isinstance(doc, dict):
            raise ValueError(f"a write shape is an object, got {doc!r}")
        dlq = doc.get("dlq")
        return cls(
            str(doc["encoder"]), str(doc["routing"]), str(doc["on_error"]), None if dlq is None else str(dlq)
        )

    def differences(self, new: WriteShape) -> list[tuple[str, str | None, str | None]]:
        """``(name, self's, new's)`` per setting that differs, named as `new`'s front door spells it."""
        pairs = zip(new.names, self.as_doc().values(), new.as_doc().values(), strict=True)
        return [(name, old, now) for name, old, now in pairs if old != now]


def shapes_of(
    shapes: tuple[WriteShape, ...], new: WriteShape | None, *, committed: bool
) -> tuple[WriteShape, ...]:
    """The shapes a state record carries: after a commit the committing one, else each since, `new` last."""
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
    """A restart's change of configuration at batch `at`: ConfigError where batch `in_flight` may be part
    written under `shapes` and a replay could not recover it, else the changes (logged unless `said`)."""
    if not shapes:
        return []  # a ledger of a version that recorded no configuration: nothing to compare
    changes = [f"{name} {old!r} -> {now!r}" for name, old, now in shapes[-1].differences(new)]
    for old in shapes if in_flight is not None else ():
        # A replay cannot recover another encoder, routing or dead-letter stream (another on_error is fine).
        for name, before, now in old.differences(new):
            if name == new.names[2] or (name == new.names[3] and None in (before, now)):
                continue
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
