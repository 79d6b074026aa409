"""The curl block of docs/lite.md ("talk to it with curl") runs as written against a fresh lite server."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from s2_sink.lite import LiteServer

LITE_DOC = Path(__file__).resolve().parents[2] / "docs" / "lite.md"
ENDPOINT_LINE = "S2=http://127.0.0.1:8080"


def _curl_block() -> str:
    text = LITE_DOC.read_text()
    section = text[text.index("## Talk to it with curl") :]
    match = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the curl section has no bash block"
    return match.group(1)


def test_readme_curl_example() -> None:
    """Each curl command of docs/lite.md succeeds: basin, JSON append, read, SSE session and tail."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    block = _curl_block()
    assert block.startswith(ENDPOINT_LINE)
    with LiteServer() as srv:
        script = "set -euo pipefail\n" + block.replace(ENDPOINT_LINE, f"S2={srv.endpoint}", 1)
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '"name":"my-local-basin"' in out
    assert '"end":{"seq_num":2' in out
    assert '"body":"hello"' in out
    assert '"body":"world"' in out
    assert "event: batch" in out
    assert "id: 1,2,26" in out  # the last record's seq_num, records and bytes so far
    assert "data: [DONE]" in out
    assert out.rstrip().splitlines()[-1].startswith('{"tail":{"seq_num":2,')
