"""Where reads happen, by stage: planning (driver), the S2 reads (tasks), rows (formats), under the Spark
adapter ``s2_sink.datasource`` (docs/architecture.md, *Reading, by stage*)."""
