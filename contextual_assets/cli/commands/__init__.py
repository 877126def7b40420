"""One module per `ctx` command, each with `add_arguments(parser)` and `run(args) -> int`.

`contextual_assets.cli.main` lists the commands and imports a command's module only to parse and run
that command: a module imports what its command needs at its top (Dagster for `ingest` and `eval`),
and `ctx search` stays free of what it does not need."""
