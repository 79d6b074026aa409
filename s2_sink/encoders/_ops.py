"""Change operations understood by the upsert encoder, mapped to the Flink S2 connector's ``@action`` codes.

| op value                                   | meaning                   | record            |
|--------------------------------------------|---------------------------|-------------------|
| ``insert``, ``update_postimage`` (Delta CDF) | row is now this           | ``@action: u``    |
| ``+I``, ``+U`` (Flink RowKind)              |                           |                   |
| ``u``                                      |                           |                   |
| ``delete`` (Delta CDF), ``-D`` (Flink), ``d`` | row is gone              | ``@action: d``    |
| ``update_preimage`` (Delta CDF), ``-U`` (Flink) | the old row of an update | dropped (no record) |
| anything else, or null                     |                           | error naming the value |
"""

from __future__ import annotations

__all__ = ["DELETE", "DROP", "UPSERT"]

UPSERT = ("insert", "update_postimage", "+I", "+U", "u")
DELETE = ("delete", "-D", "d")
DROP = ("update_preimage", "-U")
