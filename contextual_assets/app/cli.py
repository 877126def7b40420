"""`ctx`: ingest, search and status from the command line, through the same Dagster definitions,
instance and store as the UI. Settings come from the environment (see README)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
EXIT_CODES_HELP = """exit codes:
  0  done (every document ingested; the gate passed)
  1  some documents failed or were refused (a missing or unsupported file), or the gate blocked the candidate
  2  usage or configuration: a bad argument or setting, a missing gold file (the message names what to change)
  3  a dependency is unavailable: the database, the header fleet, a reranker, or the search service"""
# Search answers that mean the request or the settings must change (exit 2), not that nothing was found.
_USAGE_STATUSES = (400, 401, 403, 413, 422)
# Search answers from a service that is up while what it needs is not (e.g. the reranker).
_UNAVAILABLE_STATUSES = (502, 503, 504)
# Libraries that log below WARNING on their own loggers (bm25s sets DEBUG on itself), or warn per retry.
_NOISY_LOGGERS = {"bm25s": logging.WARNING, "sentence_transformers": logging.WARNING,
                  "transformers": logging.WARNING, "httpx": logging.WARNING, "httpcore": logging.WARNING,
                  "urllib3": logging.WARNING, "huggingface_hub": logging.WARNING, "filelock": logging.WARNING,
                  "psycopg.pool": logging.ERROR}


def configure_logging() -> None:
    """Library logs go to stderr, WARNING and up, whatever level a library gives its own logger: stdout
    carries only what a command prints (results, --json). Dagster's run logs have their own logger."""
    root = logging.getLogger()
    if not any(getattr(h, "ctx_cli", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)  # on the handler too: a logger set to DEBUG still propagates here
        handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
        handler.ctx_cli = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name, level in _NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(level)


def _settings():
    from contextual_assets.settings import PlatformSettings

    return PlatformSettings.from_env()


def _current_version(defs_resources) -> str:
    from contextual_assets.index_version import current_index_version

    return current_index_version(defs_resources["headers"], defs_resources["embedder"], defs_resources["parsing"])


def cmd_ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from contextual_assets.parsing.objects import is_object_url, local_location

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

    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    resources = build_resources(settings)
    store = resources["store"].open()
    sources, refused = collect_sources(
        args.paths, inbox=Path(local_location(settings.inbox)) if not is_object_url(settings.inbox) else None,
        source_root=Path(settings.source_root) if settings.source_root else None,
        registered={s.path: s.doc_id for s in store.corpus.list_sources()})
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
    from contextual_assets.lifecycle.coverage import production_lag

    lag = production_lag(store)
    if lag is not None and not lag.complete:
        print(f"warning: {lag.summary('production')}: search serves production without them until a candidate "
              "is promoted (`ctx status` lists them)", file=sys.stderr)
    return EXIT_FAILED if failed or refused else EXIT_OK


def _weights_warnings(resources, store) -> list[str]:
    """The served model name now serves other weights than an index version recorded (ingest builds a
    new version; said here too, since the run's own warning is not printed)."""
    from contextual_assets.lifecycle.build_targets import weights_changes
    from contextual_assets.errors import ContextualError, DependencyUnavailable
    from contextual_assets.fleet.discovery import DEFAULT_DISCOVERY

    headers = resources["headers"]
    try:
        if headers.resolved_source()[0] != "openai":
            return []
        served = DEFAULT_DISCOVERY.resolve_fleet(headers.fleet_config()).name
        return weights_changes(store, served, headers.identity()["header_model"], _current_version(resources))
    except DependencyUnavailable:
        raise  # a replica is down: every document's run would fail on it (exit 3, before any run)
    except ContextualError:
        return []  # e.g. no usable model: every document's run reports it


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
        from contextual_assets.serving.client import (
            SearchClient,
            SearchServiceError,
            SearchServiceUnavailable,
        )

        try:
            client = SearchClient(settings.search_url, os.environ.get(settings.search_token_env) or None)
            response = client.search(request)
        except SearchServiceUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        except SearchServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return _search_exit(exc.status)
    else:
        from contextual_assets.serving.service import SearchError, service_from_settings

        service = service_from_settings(settings)
        try:
            response = service.search(request)
        except SearchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return _search_exit(exc.status)
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


def _search_exit(status: int | None) -> int:
    """A refused search's exit code: no status (a bad URL or token) or a request/setting to change: 2; a
    dependency of the service down: 3; anything else (e.g. no such version): 1."""
    if status is None or status in _USAGE_STATUSES:
        return EXIT_USAGE
    return EXIT_UNAVAILABLE if status in _UNAVAILABLE_STATUSES else EXIT_FAILED


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
    from contextual_assets.lifecycle.coverage import coverage_of, live_documents, production_lag
    from contextual_assets.defs.resources import build_resources
    from contextual_assets.errors import ContextualError
    from contextual_assets.parsing.objects import is_object_url, local_location

    settings = _settings()
    resources = build_resources(settings)
    store = resources["store"].open()
    source, warning = resources["headers"].resolved_source()
    try:
        current = _current_version(resources)
    except ContextualError as exc:  # e.g. the fleet is down: the rest of the status still helps
        current, warning = None, f"current index version unknown: {exc}"
    production = store.aliases.get("production")
    live = live_documents(store, production)
    versions = store.corpus.index_versions()
    for version in versions:
        version["coverage"] = coverage_of(store, version["index_version"], live).metadata()
    lag = production_lag(store)
    # The candidate: what the current settings build, while it is not what production serves.
    candidate = None
    if current is not None and current != production:
        candidate = {"index_version": current, "coverage": coverage_of(store, current, live).metadata()}
    status = {
        "store": store.location,
        "schema_version": store.schema_version(),
        "inbox": settings.inbox if is_object_url(settings.inbox) else os.path.abspath(local_location(settings.inbox)),
        "header_source": source,
        "header_warning": warning,
        "current_index_version": current,
        "production": production,
        "candidate": candidate,
        "sources": len(store.corpus.list_sources()),
        # What production misses of the registered documents (ingest keeps it fresh while it can).
        "production_lag": lag.metadata() | {"index_version": lag.index_version} if lag is not None else None,
        "index_versions": versions,
        "fleet": fleet_health(resources["headers"]) if source == "openai" else None,
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
    if candidate is not None:
        cov = candidate["coverage"]
        print(f"{'candidate':22s} {current} covers {cov['covered']}/{cov['live']} live "
              "(`ctx eval` promotes it if the gate passes)")
    for v in versions:
        fp, cov = v["fingerprint"], v["coverage"]
        role = " [production]" if v["index_version"] == production else " [candidate]" if v["index_version"] == current \
            else ""
        print(f"  {v['index_version']}  {v['documents']:4d} docs {v['chunks']:6d} chunks  "
              f"{fp['header_source']}/{fp['header_model']} {fp['embedder']} {fp['chunker']}  "
              f"covers {cov['covered']}/{cov['live']} live{role}")
    for replica in status["fleet"] or []:
        if replica["reachable"]:
            load = (f"  running {replica['running']:g} waiting {replica['waiting']:g}"
                    if replica["running"] is not None and replica["waiting"] is not None else "")
            print(f"{'fleet':22s} {replica['base_url']}  up  {', '.join(replica['models']) or 'no models'}{load}")
        else:
            print(f"{'fleet':22s} {replica['base_url']}  DOWN  {replica['error']}")
    return EXIT_OK


def fleet_health(headers, timeout_s: float = 2.0) -> list[dict]:
    """Each replica: reachable or not (`/v1/models`), what it serves, and from vLLM's `/metrics` its
    running and waiting requests when it exposes them. A short timeout and no exception: a down
    replica is a row that says so."""
    from concurrent.futures import ThreadPoolExecutor

    config = headers.fleet_config()

    def probe(replica) -> dict:
        import httpx

        from contextual_assets.fleet.discovery import fetch_models
        from contextual_assets.fleet.vllm_metrics import metrics_url, parse_vllm_metrics

        row = {"base_url": replica.base_url, "reachable": False, "models": [], "running": None, "waiting": None,
               "error": None}
        try:
            row["models"] = [m.describe() for m in fetch_models(replica.base_url, config.api_key_for(replica),
                                                                 timeout_s=timeout_s)]
            row["reachable"] = True
        except Exception as exc:  # noqa: BLE001 - refused, timeout, HTTP error, bad JSON: all "down" here
            row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            return row
        try:
            response = httpx.get(metrics_url(replica.base_url), timeout=timeout_s)
            if response.status_code == 200:
                values = parse_vllm_metrics(response.text)
                row["running"] = values.get("vllm:num_requests_running")
                row["waiting"] = values.get("vllm:num_requests_waiting")
        except Exception:  # noqa: BLE001, S110 - no /metrics (llama.cpp, a proxy): the counts stay unknown
            pass
        return row

    with ThreadPoolExecutor(max_workers=min(8, len(config.replicas))) as pool:
        return list(pool.map(probe, config.replicas))


def cmd_rollback(args: argparse.Namespace) -> int:
    from contextual_assets.defs.resources import build_resources

    store = build_resources(_settings())["store"].open()
    restored, replaced = store.aliases.rollback(args.alias, reason=args.reason)
    print(f"{args.alias}: {replaced} -> {restored}")
    return EXIT_OK


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Run `evaluate_and_promote` (retrieval_eval, its checks, promoted_index) in this process."""
    from contextual_assets.errors import ConfigurationError
    from eval_assets.gold.gold_set import load_gold

    settings = _settings()
    gold_path = args.gold or settings.gold_path
    if not gold_path:
        raise ConfigurationError("no gold file: pass --gold or set CTX_GOLD_FILE")
    load_gold(gold_path)  # a missing or malformed file is a usage error (2), found before any run
    from contextual_assets.app.ingest_runs import ensure_dagster_home

    ensure_dagster_home(settings.home)
    import dagster as dg

    from contextual_assets.definitions import build_definitions
    from contextual_assets.defs.resources import build_resources

    resources = build_resources(settings)
    store = resources["store"].open()  # the database down: exit 3 here, not a failed run
    alias = resources["gate"].alias
    # The candidate's version needs the header fleet (its served weights): a down fleet exits 3 here.
    candidate = args.version or _current_version(resources)
    before = store.aliases.get(alias)
    defs = build_definitions(settings)
    config = {"gold_path": gold_path, "index_version": args.version}
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def(EVALUATE_AND_PROMOTE_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config={
                "ops": {"retrieval_eval": {"config": config}},
                "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
    report = evaluation_report(result, candidate, before, store.aliases.get(alias))
    code = _evaluation_exit(result, report)
    if args.json:
        print(json.dumps(report, indent=2))
        return code
    for check in report["checks"]:
        print(f"check {check['name']:20s} {'passed' if check['passed'] else 'FAILED'}")
    if report["error"]:
        print(f"error: {report['error']}", file=sys.stderr)
    elif report["evaluated"] and not report["gate_passed"]:
        print(f"gate blocked {report['candidate']}: {report['gate_reasons']}", file=sys.stderr)
    if report["comparison"]:
        print(report["comparison"])
    print(f"production -> {report['production_after'] or 'none'}")
    return code


def _plain(value):
    """A metadata value as plain JSON (numbers, strings, lists, objects); anything else as its text."""
    import math

    import dagster as dg

    value = value.value if isinstance(value, dg.MetadataValue) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def evaluation_report(result, candidate: str, before: str | None, after: str | None) -> dict:
    """What `ctx eval --json` prints: the candidate, production before and after, whether the gate
    passed and the candidate was promoted, every check, and the evaluation's metrics."""
    from contextual_assets.app.ingest_runs import failure_message

    checks = [{"name": c.check_name, "passed": c.passed, "severity": c.severity.value,
               "metadata": {k: _plain(v) for k, v in c.metadata.items()}} for c in result.get_asset_check_evaluations()]
    evaluation = next((e.materialization.metadata for e in result.get_asset_materialization_events()
                       if e.materialization.asset_key.to_user_string() == "retrieval_eval"), None)
    gate = next((c for c in checks if c["name"] == "eval_gate"), None)
    metadata = {k: _plain(v) for k, v in (evaluation or {}).items()}
    return {
        "candidate": metadata.get("candidate_version") or candidate,
        "production_before": before,
        "production_after": after,
        "evaluated": evaluation is not None,
        "gate_passed": bool(gate and gate["passed"]),
        "promoted": bool(result.asset_materializations_for_node("promoted_index")),
        "gate_reasons": metadata.get("gate_reasons"),
        "checks": checks,
        # The numbers the gate compared (per mode and metric, coverage, gold health), the table as text.
        "metrics": {k: v for k, v in metadata.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        "comparison": metadata.get("comparison"),
        # Why the evaluation or the promotion did not happen; a blocked gate says why in gate_reasons.
        "error": None if result.success or (evaluation is not None and gate is not None and not gate["passed"])
        else failure_message(result),
    }


def _evaluation_exit(result, report: dict) -> int:
    """0: the gate passed and production is the candidate; 1: the gate blocked (or promotion failed);
    3: the evaluation could not run for a dependency; 2: it could not run for something to change."""
    from contextual_assets.app.ingest_runs import failure_cause

    if report["evaluated"]:
        return EXIT_OK if report["gate_passed"] and report["promoted"] else EXIT_FAILED
    cause = failure_cause(result)
    if cause in _error_names(dependency=True) or _failure_says_unavailable(result):
        return EXIT_UNAVAILABLE
    # dg.Failure is the assets' one-line, user-facing refusal (no chunks, an embedder that cannot load).
    return EXIT_USAGE if cause == "Failure" or cause in _error_names(dependency=False) else EXIT_FAILED


def _failure_says_unavailable(result) -> bool:
    """A step's one-line failure that wraps an outage (`contextual_assets.defs.evaluation.assets.refusal`)."""
    for event in result.get_step_failure_events():
        data = event.step_failure_data.user_failure_data if event.step_failure_data else None
        flag = data.metadata.get("dependency_unavailable") if data else None
        if flag is not None and bool(getattr(flag, "value", flag)):
            return True
    return False


def _error_names(dependency: bool) -> set[str]:
    """Class names of the project's errors: the DependencyUnavailable ones, or the others (a failed
    step records what it raised by name only)."""
    from contextual_assets.errors import ContextualError, DependencyUnavailable

    names, pending = set(), [ContextualError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if issubclass(cls, DependencyUnavailable) == dependency:
            names.add(cls.__name__)
    return names


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1 to 65535)")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctx", description="Contextual-retrieval ingestion platform",
                                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do:")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help[:1].upper() + help[1:] + ".", epilog=EXIT_CODES_HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    ingest = command("ingest", "ingest files or folders through the Dagster assets")
    ingest.add_argument("paths", nargs="+", help="files or folders; a file is keyed by its path relative to the "
                        "inbox, else to CTX_SOURCE_ROOT (default: the current directory), else by its absolute path; "
                        "a file ingested before keeps its key")
    ingest.add_argument("--json", action="store_true", help="print per-document outcomes as JSON")
    ingest.add_argument("-v", "--verbose", action="store_true", help="show Dagster's run logs (on stderr)")
    ingest.set_defaults(func=cmd_ingest)
    search = command("search", "search the index")
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
    serve = command("serve", "serve search over HTTP (POST /search, GET /versions, GET /healthz)")
    serve.add_argument("--host", default="", help="address to bind (default: CTX_SERVE_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=0, help="port (default: CTX_SERVE_PORT, 8765)")
    serve.set_defaults(func=cmd_serve)
    rollback = command("rollback", "point the production alias back at its previous version")
    rollback.add_argument("--alias", default="production", help="the alias to move back (default: production)")
    rollback.add_argument("--reason", default="manual rollback", help="recorded in the alias history")
    rollback.set_defaults(func=cmd_rollback)
    evaluate = command("eval", "evaluate the candidate index against production; promote it if the gate passes "
                       "(exit 0 passed, 1 blocked)")
    evaluate.add_argument("--gold", default="", help="gold file, JSONL or YAML (default: CTX_GOLD_FILE)")
    evaluate.add_argument("--version", default="", help="candidate index version (default: current settings)")
    evaluate.add_argument("--json", action="store_true",
                          help="print the candidate, production before and after, the gate, every check and the "
                               "metrics as one JSON object")
    evaluate.set_defaults(func=cmd_evaluate)
    status = command("status", "store, settings, index versions with their coverage, the candidate, and the "
                     "header fleet's health")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a usage error exits 2 here (argparse)
    configure_logging()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from contextual_assets.errors import ContextualError, DependencyUnavailable

    try:
        return args.func(args)
    except DependencyUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except ContextualError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
