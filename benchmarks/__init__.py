"""Benchmarks: ``python -m benchmarks.<key>``."""
