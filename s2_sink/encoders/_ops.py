"""Change operations understood by the upsert encoder, mapped to the Flink S2 connector's ``@action`` codes
(the table: docs/encoding.md).
"""

from __future__ import annotations

__all__ = ["DELETE", "DROP", "UPSERT"]

UPSERT = ("insert", "update_postimage", "+I", "+U", "u")
DELETE = ("delete", "-D", "d")
DROP = ("update_preimage", "-U")
