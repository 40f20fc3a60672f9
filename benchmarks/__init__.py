"""fp8spec's benchmarks, run from the repository root as modules: ``python -m benchmarks.<topic>.<script> --help``."""
