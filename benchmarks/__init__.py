"""Benchmarks: ``python -m benchmarks.<key>`` prints our time beside the target/peer measured in the same run."""
