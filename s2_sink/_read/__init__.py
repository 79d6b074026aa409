"""Where reads happen, by stage: planning (driver), the S2 reads (tasks), rows (formats).

``s2_sink.datasource`` is the thin Spark adapter over this package; the stages and what each holds:
docs/architecture.md, *Reading, by stage*.
"""
