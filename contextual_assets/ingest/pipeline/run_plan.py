"""What one ingest run builds, and the pipelines that build it: the version the current settings
describe and, while production differs and its recorded recipe still builds it, production too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contextual_assets.embedder_config import EmbedderConfig
from contextual_assets.headers.configured import HeaderConfig
from contextual_assets.lifecycle.build_targets import BuildTarget, current_target, production_target
from contextual_assets.parsing.config import ParsingConfig
from contextual_assets.store import ChunkStore

from contextual_assets.ingest.pipeline.concurrent import ConcurrentPipelines
from contextual_assets.ingest.pipeline.header_stage import HeaderHold
from contextual_assets.ingest.pipeline.document_pipeline import DocumentPipeline, PipelineSettings

CURRENT = "current"


@dataclass
class RunPlan:
    current: BuildTarget
    fresh: BuildTarget | None  # production, kept fresh in the same run
    lag_reason: str | None  # why production cannot be kept fresh, when it cannot
    resolved_source: str  # the header source that runs (`auto` resolved)
    source_warning: str | None  # why `auto` chose what it chose
    alias: str
    current_serves: bool = False  # the current version is production: what it gets is served, ungated

    @property
    def targets(self) -> list[BuildTarget]:
        return [t for t in (self.current, self.fresh) if t is not None]

    def production_update(self) -> str:
        """What this run does for production, for each committed document's metadata."""
        if self.fresh is not None:
            return f"scheduled in this run ({self.fresh.index_version}; see its observation)"
        return f"not built: {self.lag_reason}" if self.lag_reason else "none (production is this version)"


def plan_run(store: ChunkStore, headers: HeaderConfig, embedder: EmbedderConfig, parsing: ParsingConfig,
             alias: str) -> RunPlan:
    """The run's targets (raises `ContextualError` when the header source cannot be set up)."""
    resolved, warning = headers.resolved_source()
    current = current_target(headers, embedder, parsing, store)
    fresh, lag_reason = production_target(current, alias, store, headers, embedder, parsing)
    return RunPlan(current, fresh, lag_reason, resolved, warning, alias,
                   current_serves=store.aliases.get(alias) == current.index_version)


def uncommitted(store: ChunkStore, keys: list[str], targets: list[BuildTarget]) -> list[str]:
    """`keys` less the documents stored at every target version from their registered revision: what a
    retry of the step still has to do (an attempt commits document by document)."""
    registered = {s.doc_id: s.file_hash for s in store.corpus.list_sources()}
    held = [{d.doc_id: d.file_hash for d in store.corpus.documents(t.index_version)} for t in targets]
    return [k for k in keys if not all(k in h and h[k] == registered.get(k) for h in held)]


def run_pipelines(plan: RunPlan, keys: list[str], store: ChunkStore, parsing: ParsingConfig,
                  settings: PipelineSettings, header_metadata: Callable | None = None) -> ConcurrentPipelines:
    """The run's pipelines over `keys`: the current version's, and production's when it is kept fresh."""

    def pipeline_for(target: BuildTarget, on_headers: Callable | None = None,
                     header_check: Callable | None = None) -> DocumentPipeline:
        return DocumentPipeline(
            store=store, counter=parsing.counter(), chunk_tokens=target.chunk_tokens, max_bytes=parsing.max_bytes,
            max_pdf_pages=parsing.max_pdf_pages, header_source=target.header_source,
            context_tokens=target.context_tokens, embedder=target.embedder, index_version=target.index_version,
            fingerprint=target.fingerprint, recipe=target.recipe, header_metadata=on_headers, settings=settings,
            header_check=header_check,
        )

    def titles() -> dict[str, str]:
        return {d.doc_id: d.title for t in plan.targets for d in store.corpus.documents(t.index_version)}

    runs = ConcurrentPipelines()
    # Production is the current version: what this run commits is served at once and no gate judges it, so
    # a document whose headers fail the per-header checks is held from it (reported as failed).
    runs.add(CURRENT, pipeline_for(plan.current, header_metadata,
                                   header_check=HeaderHold(titles) if plan.current_serves else None), keys)
    if plan.fresh is not None:
        # Same headers: production's pass comes after, from the header cache, at no LLM cost; other
        # headers: both fleets work at once.
        same_headers = plan.fresh.header_source.identity == plan.current.header_source.identity
        # No gate judges what reaches production this way: a document whose headers fail the gate's
        # per-header checks is held from it (the current version, which the gate judges, still gets it).
        runs.add(plan.alias, pipeline_for(plan.fresh, header_check=HeaderHold(titles)), keys,
                 after=CURRENT if same_headers else None)
    return runs
