"""The read side stays laid out by stage: a streaming read task passes through few modules of the package."""

from __future__ import annotations

import pytest

from benchmarks.read_modules import main

# The Spark adapter, the session, one rows module per format (picked by the adapter), the ReadBatch
# decoding and its columns, and the transport: the loop and clients, the SDK boundary and the unary
# requests' own HTTP/2 frames (`_transport.h2_frames`, beside the SDK boundary that would pass 450 lines).
_MOST_MODULES = {"raw": 8, "json": 8, "kafka": 8, "upsert": 8}


@pytest.mark.slow  # a lite server and a traced read per format: seconds each, kept out of make test-fast
@pytest.mark.parametrize("fmt", sorted(_MOST_MODULES))
def test_a_streaming_read_task_passes_few_modules(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`benchmarks.read_modules` traces one partition's read, from `S2StreamReader.read` to rows, against a
    lite server: the modules of s2_sink it runs code of stay within the bound."""
    found = main(["--format", fmt, "--records", "300"])
    capsys.readouterr()
    assert found["modules"] <= _MOST_MODULES[fmt], found
