"""`ctx`: ingest, search and status from the command line, through the same Dagster definitions,
instance and store as the UI. Settings come from the environment (see README)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Search answers that mean the request or the settings must change (exit 2), not that nothing was found.
_USAGE_STATUSES = (400, 401, 403, 413, 422)


def _settings():
    from contextual_assets.settings import PlatformSettings

    return PlatformSettings.from_env()


def _current_version(defs_resources) -> str:
    from contextual_assets.defs.resources import current_index_version

    return current_index_version(defs_resources["headers"], defs_resources["embedder"], defs_resources["parsing"])


def cmd_ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    settings = _settings()
    from contextual_assets.app.ingest_runs import (
        collect_sources,
        ensure_dagster_home,
        ingest_partitions,
        register_sources,
    )

    ensure_dagster_home(settings.home)
    from pathlib import Path

    import dagster as dg

    from contextual_assets.defs.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    resources = build_resources(settings)
    store = resources["store"].open()
    sources, refused = collect_sources(
        args.paths, inbox=Path(settings.inbox),
        source_root=Path(settings.source_root) if settings.source_root else None,
        registered={s.path: s.doc_id for s in store.list_sources()})
    for reason in refused:
        print(f"skipped: {reason}", file=sys.stderr)
    if not sources:
        print("nothing to ingest", file=sys.stderr)
        return EXIT_USAGE if not refused else EXIT_FAILED
    for warning in _weights_warnings(resources, store):
        print(f"warning: {warning}", file=sys.stderr)
    defs = build_definitions(settings)
    with dg.DagsterInstance.get() as instance:
        register_sources(store, instance, sources)
        bar = tqdm(total=len(sources), unit="doc", desc="ingest", disable=args.json or not sys.stderr.isatty())
        def done(outcome):
            bar.update(1)
            if not args.json:
                status = f"ok   {outcome.chunks:5d} chunks" if outcome.success else "FAIL"
                tqdm.write(f"{status}  {outcome.key}" + (f"  -- {outcome.error}" if outcome.error else ""),
                           file=sys.stderr)
        outcomes = ingest_partitions(defs, instance, sources, on_done=done,
                                     log_level="DEBUG" if args.verbose else "CRITICAL")
        bar.close()
    failed = [o for o in outcomes if not o.success]
    if args.json:
        print(json.dumps([o.model_dump() for o in outcomes], indent=2))
    else:
        print(f"{len(outcomes) - len(failed)} ingested, {len(failed)} failed; store {store.location}; "
              f"index version {_current_version(resources)}")
    from contextual_assets.coverage import production_lag

    lag = production_lag(store)
    if lag is not None and not lag.complete:
        print(f"warning: {lag.summary('production')}: search serves production without them until a candidate "
              "is promoted (`ctx status` lists them)", file=sys.stderr)
    return EXIT_FAILED if failed or refused else EXIT_OK


def _weights_warnings(resources, store) -> list[str]:
    """The served model name now serves other weights than an index version recorded (ingest builds a
    new version; said here too, since the run's own warning is not printed)."""
    from contextual_assets.defs.build_targets import weights_changes
    from contextual_assets.errors import ContextualError
    from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY

    headers = resources["headers"]
    try:
        if headers.resolved_source()[0] != "openai":
            return []
        served = DEFAULT_DISCOVERY.resolve_fleet(headers.fleet_config()).name
        return weights_changes(store, served, headers.identity()["header_model"], _current_version(resources))
    except ContextualError:
        return []  # the fleet is unreachable: every document's run reports it


def cmd_search(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from contextual_assets.serving.api import SearchRequest

    settings = _settings()
    try:
        request = SearchRequest(query=args.query, k=args.k, mode=args.mode, version=args.version or None,
                                rerank=args.rerank)
    except ValidationError as exc:
        first = exc.errors()[0]
        print(f"error: {'.'.join(map(str, first['loc']))}: {first['msg']}", file=sys.stderr)
        return EXIT_USAGE
    if settings.search_url:
        # A running service: this process imports neither torch nor Dagster.
        from contextual_assets.serving.client import SearchClient, SearchServiceError

        try:
            client = SearchClient(settings.search_url, os.environ.get(settings.search_token_env) or None)
            response = client.search(request)
        except SearchServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE if exc.status is None or exc.status in _USAGE_STATUSES else EXIT_FAILED
    else:
        from contextual_assets.serving.service import SearchError, service_from_settings

        service = service_from_settings(settings)
        try:
            response = service.search(request)
        except SearchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE if exc.status in _USAGE_STATUSES else EXIT_FAILED
        finally:
            service.store.close()
    hits = response.hits
    if args.json:
        print(json.dumps([h.model_dump() for h in hits], indent=2, ensure_ascii=False))
        return EXIT_OK
    for h in hits:
        pages = f" p.{h.page_start}" + (f"-{h.page_end}" if h.page_end and h.page_end != h.page_start else "") \
            if h.page_start else ""
        section = " > ".join(h.section_path) or "-"
        print(f"{h.rank:2d}. [{h.score:.4f}] {h.document}{pages} :: {section}")
        if h.header:
            print(f"    header: {h.header}")
        snippet = " ".join(h.text.split())
        print(f"    {snippet[:240]}{'...' if len(snippet) > 240 else ''}")
    if not hits:
        print("no results", file=sys.stderr)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from contextual_assets.serving.app import create_app
    from contextual_assets.serving.service import service_from_settings

    settings = _settings()
    token = os.environ.get(settings.search_token_env) or None
    host = args.host or settings.serve_host
    port = args.port or settings.serve_port
    service = service_from_settings(settings, vectors_in_memory=True)
    if host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(f"warning: serving on {host} without a token; set {settings.search_token_env} to require one",
              file=sys.stderr)
    default = service.default_version()
    print(f"serving {service.store.location} on http://{host}:{port} "
          f"({service.alias} -> {service.production() or 'not set'}; default {default or 'none'}; "
          f"token {'required' if token else 'off'})", file=sys.stderr, flush=True)
    app = create_app(service, token=token, max_request_bytes=settings.serve_max_request_bytes)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from contextual_assets.coverage import coverage_of, live_documents, production_lag
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.errors import ContextualError

    settings = _settings()
    resources = build_resources(settings)
    store = resources["store"].open()
    source, warning = resources["headers"].resolved_source()
    try:
        current = _current_version(resources)
    except ContextualError as exc:  # e.g. the fleet is down: the rest of the status still helps
        current, warning = None, f"current index version unknown: {exc}"
    production = store.get_alias("production")
    live = live_documents(store, production)
    versions = store.index_versions()
    for version in versions:
        version["coverage"] = coverage_of(store, version["index_version"], live).metadata()
    lag = production_lag(store)
    status = {
        "store": store.location,
        "schema_version": store.schema_version(),
        "inbox": os.path.abspath(settings.inbox),
        "header_source": source,
        "header_warning": warning,
        "current_index_version": current,
        "production": production,
        "sources": len(store.list_sources()),
        # What production misses of the registered documents (ingest keeps it fresh while it can).
        "production_lag": lag.metadata() | {"index_version": lag.index_version} if lag is not None else None,
        "index_versions": versions,
    }
    if args.json:
        print(json.dumps(status, indent=2))
        return EXIT_OK
    for key in ("store", "schema_version", "inbox", "header_source", "current_index_version", "production", "sources"):
        print(f"{key:22s} {status[key]}")
    if warning:
        print(f"{'note':22s} {warning}")
    if lag is not None and not lag.complete:
        print(f"{'production lag':22s} {lag.summary('production')}")
    for v in versions:
        fp, cov = v["fingerprint"], v["coverage"]
        print(f"  {v['index_version']}  {v['documents']:4d} docs {v['chunks']:6d} chunks  "
              f"{fp['header_source']}/{fp['header_model']} {fp['embedder']} {fp['chunker']}  "
              f"covers {cov['covered']}/{cov['live']} live")
    return EXIT_OK


def cmd_rollback(args: argparse.Namespace) -> int:
    from contextual_assets.defs.resources import build_resources

    store = build_resources(_settings())["store"].open()
    restored, replaced = store.rollback_alias(args.alias, reason=args.reason)
    print(f"{args.alias}: {replaced} -> {restored}")
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Run `evaluate_and_promote` (retrieval_eval, its checks, promoted_index) in this process."""
    settings = _settings()
    from contextual_assets.app.ingest_runs import ensure_dagster_home

    ensure_dagster_home(settings.home)
    import dagster as dg

    from contextual_assets.defs.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    defs = build_definitions(settings)
    config = {"gold_path": args.gold, "index_version": args.version}
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def("evaluate_and_promote").execute_in_process(
            instance=instance, raise_on_error=False, run_config={
                "ops": {"retrieval_eval": {"config": config}},
                "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    evaluations = [e.asset_check_evaluation_data for e in result.all_events
                   if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    for check in evaluations:
        print(f"check {check.check_name:20s} {'passed' if check.passed else 'FAILED'}")
    materialized = {e.step_materialization_data.materialization.asset_key.to_user_string():
                    e.step_materialization_data.materialization for e in result.get_asset_materialization_events()}
    if "retrieval_eval" not in materialized:
        from contextual_assets.app.ingest_runs import failure_message

        print(f"error: {failure_message(result)}", file=sys.stderr)
        return EXIT_FAILED
    print(materialized["retrieval_eval"].metadata["comparison"].value)
    store = build_resources(settings)["store"].open()
    print(f"production -> {store.get_alias('production') or 'none'}")
    gate = next((c for c in evaluations if c.check_name == "eval_gate"), None)
    return EXIT_OK if gate is not None and gate.passed else EXIT_FAILED


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctx", description="Contextual-retrieval ingestion platform")
    sub = parser.add_subparsers(dest="command", required=True)
    ingest = sub.add_parser("ingest", help="ingest files or folders through the Dagster assets")
    ingest.add_argument("paths", nargs="+", help="files or folders; a file is keyed by its path relative to the "
                        "inbox, else to CTX_SOURCE_ROOT (default: the current directory), else by its absolute path; "
                        "a file ingested before keeps its key")
    ingest.add_argument("--json", action="store_true", help="print per-document outcomes as JSON")
    ingest.add_argument("-v", "--verbose", action="store_true", help="show Dagster's run logs")
    ingest.set_defaults(func=cmd_ingest)
    search = sub.add_parser("search", help="search the index")
    search.add_argument("query", help="the question or keywords to search for")
    search.add_argument("-k", type=int, default=5, help="how many hits to show (default: 5)")
    search.add_argument("--mode", choices=["hybrid", "dense", "lexical"], default="hybrid",
                        help="dense + lexical fused by reciprocal rank (default), or one of them")
    search.add_argument("--version", default="",
                        help="index version (default: the 'production' alias, else the one current settings build)")
    search.add_argument("--rerank", action=argparse.BooleanOptionalAction, default=None,
                        help="rerank the fused candidates (default: on when CTX_RERANK_BASE_URL or "
                             "CTX_RERANK_MODEL_DIR is set)")
    search.add_argument("--json", action="store_true", help="print the hits as JSON")
    search.set_defaults(func=cmd_search)
    serve = sub.add_parser("serve", help="serve search over HTTP (POST /search, GET /versions, GET /healthz)")
    serve.add_argument("--host", default="", help="address to bind (default: CTX_SERVE_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=0, help="port (default: CTX_SERVE_PORT, 8765)")
    serve.set_defaults(func=cmd_serve)
    rollback = sub.add_parser("rollback", help="point the production alias back at its previous version")
    rollback.add_argument("--alias", default="production", help="the alias to move back (default: production)")
    rollback.add_argument("--reason", default="manual rollback", help="recorded in the alias history")
    rollback.set_defaults(func=cmd_rollback)
    evaluate = sub.add_parser("eval", help="evaluate the candidate index against production; promote if the gate passes")
    evaluate.add_argument("--gold", default="", help="gold file (default: CTX_GOLD_FILE)")
    evaluate.add_argument("--version", default="", help="candidate index version (default: current settings)")
    evaluate.set_defaults(func=cmd_evaluate)
    status = sub.add_parser("status", help="store, settings and index versions")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("sentence_transformers", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from contextual_assets.errors import ContextualError

    try:
        return args.func(args)
    except ContextualError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
