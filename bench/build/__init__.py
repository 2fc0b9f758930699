"""Benchmarks of building a library: `sheaf build`, its Dagster side, its scale and its faults."""
