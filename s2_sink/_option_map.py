"""Option maps with case-insensitive names, as Spark treats data source options: Spark lower-cases the names
it hands a data source while users write ``s2.Basin``, so every option is read through `OptionMap`, where two
spellings of one name are an error rather than a silent pick.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from s2_sink.errors import ConfigError

__all__ = ["OptionMap", "WriteParallelism", "parse_bool", "parse_write_parallelism"]

WriteParallelism = int | Literal["auto"]
"""How many tasks write a micro-batch: ``"auto"`` (sized to the batch) or that many."""


def parse_bool(name: str, raw: object) -> bool:
    """The one boolean vocabulary of every option: a bool, or ``true``/``false`` in any case, as Spark's own
    options spell them."""
    if isinstance(raw, bool):
        return raw
    lowered = raw.strip().lower() if isinstance(raw, str) else None
    if lowered not in ("true", "false"):
        raise ConfigError(f"option {name}={raw!r} must be true or false")
    return lowered == "true"


def parse_write_parallelism(name: str, raw: object) -> WriteParallelism:
    """``auto`` (any case) or a positive integer."""
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit() and int(text) > 0:
            return int(text)
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    raise ConfigError(f"option {name}={raw!r} must be auto or a positive integer (the number of write tasks)")


class OptionMap(Mapping[str, Any]):
    """A read-only view of an option mapping keyed by lower-cased names; `spelling` gives the user's."""

    __slots__ = ("_spelling", "_values")

    def __init__(self, options: Mapping[str, Any]) -> None:
        self._values: dict[str, Any] = {}
        self._spelling: dict[str, str] = {}
        spelled = options._spelling if isinstance(options, OptionMap) else {k: k for k in options}
        for key, value in ((spelled[k], v) for k, v in options.items()):
            if not isinstance(key, str):
                raise ConfigError(f"option names must be strings, got {key!r}")
            name = key.lower()
            if name in self._values:
                raise ConfigError(
                    f"option {key!r} is given twice (as {self._spelling[name]!r} too): option names are "
                    "case-insensitive, set it once"
                )
            self._values[name] = value
            self._spelling[name] = key

    def __getitem__(self, name: str) -> Any:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        # Values may hold the access token: show names only.
        return f"OptionMap({sorted(self._values)})"

    def spelling(self, name: str) -> str:
        return self._spelling.get(name.lower(), name)

    def text(self, name: str) -> str | None:
        """The value as a string, or None when unset."""
        value = self._values.get(name.lower())
        return None if value is None else str(value)
