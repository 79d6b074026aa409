"""Task side of a write: one Spark task's rows become records, are cut into appends and appended to S2."""
