"""The ingest data path outside Dagster: inbox scanning, document keys, parsing a file into chunks, and the
cross-document pipeline (parse -> headers -> embedding -> commit) that one ingest step runs."""
