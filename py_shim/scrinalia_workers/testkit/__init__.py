"""What tests and benchmarks share: throwaway PostgreSQL clusters, daemon processes, waiting."""
