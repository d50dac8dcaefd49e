"""Benchmark scripts, grouped by what they measure; run as ``python -m benchmarks.<group>.<script>`` (README.md)."""
