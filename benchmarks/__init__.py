"""Benchmarks: each module has main() and prints ratios against a peer measured in the same run."""
