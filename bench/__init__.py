"""Benchmarks (not part of the test suite): `python -m bench` prints a table, writes RESULTS.md."""
