"""Run with the python of an s2-sink install without pyspark (or with ``--block-pyspark``, which hides it).

It imports the package, the lite server, the CLI and the record frame's constants, then touches each entry
point that needs Spark, as a user does, and prints one JSON line: the version, the file it imported, and, by
entry point, the name and message of the ModuleNotFoundError it raised. Used by tests/packaging/test_wheel.py
(a virtualenv without pyspark) and tests/unit/test_pyspark_extra.py (``--block-pyspark``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

ENTRY_POINTS = ("S2Writer", "S2DataSource", "UpsertEncoder", "decode_json", "register")


class _NoPyspark:
    """An import finder that fails pyspark as a missing distribution does."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.partition(".")[0] == "pyspark":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def main() -> None:
    if "--block-pyspark" in sys.argv:
        sys.meta_path.insert(0, _NoPyspark())
    import s2_sink
    import s2_sink.cli._main
    import s2_sink.encoders
    import s2_sink.lite

    said: dict[str, list[str | None]] = {}
    for name in ENTRY_POINTS:
        try:
            found = getattr(s2_sink, name)
            if name == "register":
                found(None)  # registering format("s2") with a session
        except ModuleNotFoundError as exc:
            said[name] = [exc.name, str(exc)]
    report = {
        "version": s2_sink.__version__,
        "file": s2_sink.__file__,
        "body": s2_sink.encoders.BODY,
        "said": said,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
