"""The benchmarks of issue 4: `python -m bench` (see bench/README.md)."""
