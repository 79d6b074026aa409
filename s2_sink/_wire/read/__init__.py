"""Read messages (s2.v1 ``ReadBatch``) decoded in bulk into record columns."""
