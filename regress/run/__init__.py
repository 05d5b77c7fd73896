"""A run: the nightly, the worker pool, one case, the suites, the ingest client (README.md)."""
