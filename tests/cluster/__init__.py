"""Faults on a Spark standalone cluster started by the tests (``make test-cluster``): lost executors,
FetchFailed and stage retries, and restarts in the same driver process, which local mode cannot produce."""
