"""The SDK boundary: only `s2_sink._transport.sdk` imports s2-sdk's private modules.

Every other module of the sink takes what it needs of them from there, so an SDK release that moved one is
met in one module (and named by `test_sdk_contract`). The lite server is its own program: it may use the
SDK's generated protobuf messages (``s2_sdk._generated``), the S2 wire format it serves, and nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "s2_sink"
BOUNDARY = PACKAGE / "_transport" / "sdk.py"
LITE = PACKAGE / "lite"


def _private_sdk_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [n for n in names if n.startswith("s2_sdk._")]
    return sorted(set(found))


def test_only_the_boundary_imports_private_sdk_modules() -> None:
    """No module of the sink but `_transport/sdk.py` imports ``s2_sdk._*``."""
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != BOUNDARY and LITE not in path.parents
        if (names := _private_sdk_imports(path))
    }
    assert not offenders, f"import these through s2_sink._transport.sdk instead: {offenders}"


def test_the_lite_server_uses_only_the_generated_messages() -> None:
    """The lite server imports nothing private of the SDK but its generated protobuf messages."""
    offenders = {
        str(path.relative_to(ROOT)): bad
        for path in sorted(LITE.rglob("*.py"))
        if (bad := [n for n in _private_sdk_imports(path) if not n.startswith("s2_sdk._generated")])
    }
    assert not offenders, offenders


def test_the_boundary_walk_sees_imports(tmp_path: Path) -> None:
    """The walk finds ``import s2_sdk._x``, ``from s2_sdk._x import y`` and ``from s2_sdk import _x``-style
    private module imports, so the two tests above can fail."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import s2_sdk._generated.s2.v1.s2_pb2 as pb\n"
        "def f():\n    from s2_sdk._client import HttpClient\n"
        "from s2_sdk import S2\n"
    )
    assert _private_sdk_imports(probe) == [
        "s2_sdk._client",
        "s2_sdk._client.HttpClient",
        "s2_sdk._generated.s2.v1.s2_pb2",
    ]
