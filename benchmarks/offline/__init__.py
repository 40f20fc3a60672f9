"""Carrying the benchmarks' packages to a GPU machine without network (README.md)."""
