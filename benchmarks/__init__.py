"""Benchmark harness: s2_sink next to Spark's own sinks and the naive S2 write patterns, in one run.

Run with ``python -m benchmarks.run [--quick]`` (``make bench`` / ``make bench-quick``).
"""
