"""Entry points: the `ctx` command line, `make demo`, and launching ingest runs on a Dagster instance."""
