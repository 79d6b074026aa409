"""The lite server's dependencies stay out of the write path: the ``lite`` extra is only for the server."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
import s2_sink
after_package = sorted(m for m in ("h11", "h2", "zstandard", "s2_sink.lite") if m in sys.modules)
import s2_sink.writer
after_writer = sorted(m for m in ("h11", "s2_sink.lite") if m in sys.modules)
print(json.dumps([after_package, after_writer]))
"""


def test_package_and_writer_do_not_load_the_server() -> None:
    """``import s2_sink`` loads none of h2, h11, zstandard or the lite server; the writer loads neither h11
    nor the server (h2 and zstandard come with the SDK's own transport, not from the lite extra)."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [[], []]
