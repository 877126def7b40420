"""The fault bench's harness: the simulated fleet, `ctx ingest` subprocesses in their own Dagster home and
store, the store checks every scenario ends with, the result row, and the per-scenario context (work
directory, the bench's Postgres server). Scenarios: bench/faults.py, fault_tails.py, fault_process.py,
fault_crashes.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.corpora import CHUNK_TOKENS
from bench.sim import FaultConfig, FleetSimulator, ReplicaSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
# A header the simulator writes (header_sentence); every malformed answer mode breaks this shape.
SIM_HEADER = re.compile(r"^This passage \(ref [0-9a-f]{6}\) covers [^<>{}]{0,200}\.$")


# ---------------------------------------------------------------- fleet

class Fleet:
    """The simulator in this process (its own thread and event loop): this process only waits on
    the `ctx ingest` subprocesses, and kill / restart / stats work on a dead replica too (its admin
    endpoint dies with it)."""

    def __init__(self, workdir: Path, speeds: list[float], time_scale: float, faults: dict | None = None,
                 max_num_seqs: int = 64):
        faults = faults or {}
        specs = [ReplicaSpec(speed=speed, max_num_seqs=max_num_seqs, faults=FaultConfig(**faults.get(i, {})))
                 for i, speed in enumerate(speeds)]
        self.sim = FleetSimulator(specs, time_scale=time_scale).start()
        self.base_urls: list[str] = self.sim.base_urls

    def stats(self) -> list[dict]:
        return self.sim.stats()

    def completed(self) -> int:
        return sum(s["completed"] for s in self.stats())

    def set_faults(self, i: int, **faults) -> None:
        self.sim.set_faults(i, **faults)

    def kill(self, i: int) -> None:
        self.sim.kill(i)

    def restart(self, i: int) -> None:
        self.sim.restart(i)

    def stop(self) -> None:
        self.sim.stop()

    def write_fleet_file(self, path: Path, max_in_flight: int, **fleet) -> Path:
        import yaml

        data = {"replicas": [{"base_url": u, "max_in_flight": max_in_flight} for u in self.base_urls], **fleet}
        path.write_text(yaml.safe_dump(data))
        return path


# ---------------------------------------------------------------- ctx ingest

@dataclass
class Env:
    workdir: Path
    database_url: str = ""
    home_name: str = "dagster_home"
    extra: dict = field(default_factory=dict)

    @property
    def ctx_home(self) -> Path:
        return self.workdir / ".ctx"

    @property
    def dagster_home(self) -> Path:
        return self.workdir / self.home_name

    def prepare(self) -> None:
        import dagster as dg

        if not self.dagster_home.exists():
            self.dagster_home.mkdir(parents=True)
            shutil.copyfile(REPO_ROOT / "dagster.yaml", self.dagster_home / "dagster.yaml")
            dg.DagsterInstance.from_config(str(self.dagster_home)).dispose()

    def environ(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTX_", "DAGSTER_")) and k != "DATABASE_URL"}
        env.update({
            "CTX_HOME": str(self.ctx_home), "DAGSTER_HOME": str(self.dagster_home), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "CTX_HEADER_SOURCE": "openai",
            "CTX_CHUNK_TOKENS": str(CHUNK_TOKENS), "DATABASE_URL": self.database_url,
            # Folders under the work directory are keyed `<folder>/<file>` (see `expected_chunks`).
            "CTX_SOURCE_ROOT": str(self.workdir),
        })
        env.update({k: str(v) for k, v in self.extra.items()})
        return env

    def start(self, *paths: Path) -> subprocess.Popen:
        self.prepare()
        return subprocess.Popen([sys.executable, "-m", "contextual_assets.cli.main", "ingest", "--json", *map(str, paths)],
                                cwd=REPO_ROOT, env=self.environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def store(self):
        from contextual_assets.store import open_store

        return open_store(self.database_url or None, self.ctx_home / "index.duckdb")

    def committed_partitions(self) -> set[str]:
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.dagster_home)) as instance:
            return set(instance.get_materialized_partitions(dg.AssetKey("chunk_embeddings")))


@dataclass
class Ingest:
    rc: int
    outcomes: list[dict]
    stdout: str
    stderr: str
    wall_s: float

    @property
    def failed(self) -> dict[str, str]:
        return {o["key"]: o.get("error") or "" for o in self.outcomes if not o["success"]}

    @property
    def succeeded(self) -> set[str]:
        return {o["key"] for o in self.outcomes if o["success"]}

    def tail(self) -> str:
        return (self.stdout[-1500:] + "\n" + self.stderr[-1500:]).strip()


def finish(proc: subprocess.Popen, started: float, timeout: float = 300) -> Ingest:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    try:
        outcomes = json.loads(out) if out.strip() else []
    except json.JSONDecodeError:
        outcomes = []
    return Ingest(proc.returncode, outcomes, out, err, time.monotonic() - started)


def ingest(env: Env, *paths: Path, timeout: float = 300) -> Ingest:
    started = time.monotonic()
    return finish(env.start(*paths), started, timeout)


def wait_until(predicate: Callable[[], bool], proc: subprocess.Popen | None, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"ingest ended (rc {proc.returncode}) before {what}: {(out + err)[-400:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# ---------------------------------------------------------------- store checks

@dataclass
class StoreState:
    documents: dict[str, int]  # doc_id -> n_chunks (per index version summed by doc)
    rows: dict[str, int]  # doc_id -> chunk rows
    ordinals_ok: dict[str, bool]
    duplicates: int
    committed: int
    versions: int
    headers: list[str]
    cache_rows: int


def store_state(env: Env) -> StoreState:
    store = env.store()
    try:
        documents: dict[str, int] = {}
        for record in store.corpus.documents():
            documents[record.doc_id] = documents.get(record.doc_id, 0) + record.n_chunks
        rows: dict[str, int] = {}
        ordinals: dict[str, list[int]] = {}
        for doc_id, ordinal in store.backend.query("SELECT doc_id, ordinal FROM ctx_chunks"):
            rows[doc_id] = rows.get(doc_id, 0) + 1
            ordinals.setdefault(doc_id, []).append(ordinal)
        duplicates = store.backend.query(
            "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM ctx_chunks "
            "GROUP BY doc_id, ordinal, index_version) AS g")[0][0]
        versions = store.backend.query("SELECT COUNT(DISTINCT index_version) FROM ctx_chunks")[0][0]
        headers = [r[0] or "" for r in store.backend.query("SELECT header FROM ctx_chunks")]
        cache_rows = store.backend.query("SELECT COUNT(*) FROM ctx_header_cache")[0][0]
        return StoreState(
            documents=documents, rows=rows,
            ordinals_ok={d: sorted(o) == list(range(len(o))) for d, o in ordinals.items()},
            duplicates=int(duplicates or 0), committed=sum(rows.values()), versions=int(versions or 0),
            headers=headers, cache_rows=int(cache_rows or 0),
        )
    finally:
        store.close()


def whole_documents_problems(state: StoreState, expected: dict[str, int]) -> list[str]:
    """Every stored document is whole: its n_chunks is the expected count, its rows 0..n-1."""
    problems = []
    for doc_id, n in state.documents.items():
        if doc_id in expected and n != expected[doc_id]:
            problems.append(f"{doc_id}: n_chunks {n} != {expected[doc_id]}")
        if state.rows.get(doc_id, 0) != n:
            problems.append(f"{doc_id}: {state.rows.get(doc_id, 0)} rows for n_chunks {n} (partial document)")
        if not state.ordinals_ok.get(doc_id, n == 0):
            problems.append(f"{doc_id}: ordinals not 0..n-1")
    for doc_id in set(state.rows) - set(state.documents):
        problems.append(f"{doc_id}: {state.rows[doc_id]} orphan rows")
    return problems


def lost(state: StoreState, expected: dict[str, int], should_commit) -> int:
    return sum(n for k, n in expected.items() if k in should_commit and state.rows.get(k, 0) < n)


# ---------------------------------------------------------------- results

@dataclass
class Result:
    name: str
    passed: bool = False
    chunks_expected: int = 0
    chunks_committed: int = 0
    chunks_lost: int = 0
    duplicates: int = 0
    llm_calls_respent: int = 0
    detail: str = ""
    checks: list[tuple[str, bool]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # measured numbers, written to the JSON

    def check(self, label: str, ok: bool) -> bool:
        self.checks.append((label, bool(ok)))
        return ok

    def settle(self, state: StoreState, expected: dict[str, int], should_commit, extra: str = "") -> None:
        self.chunks_expected = sum(expected[k] for k in should_commit)
        self.chunks_committed = state.committed
        self.chunks_lost = lost(state, expected, should_commit)
        self.duplicates = state.duplicates
        problems = whole_documents_problems(state, expected)
        self.check("no partial document", not problems)
        self.check("nothing lost", self.chunks_lost == 0)
        self.check("no duplicates", self.duplicates == 0)
        bad_headers = [h for h in state.headers if not SIM_HEADER.match(h)]
        self.check("every stored header is a valid answer", not bad_headers)
        failed = [label for label, ok in self.checks if not ok]
        self.passed = not failed
        parts = [extra] if extra else []
        if failed:
            parts.append("FAILED: " + "; ".join(failed))
        if problems:
            parts.append("problems: " + "; ".join(problems[:3]))
        if bad_headers:
            parts.append(f"bad header e.g. {bad_headers[0][:80]!r}")
        self.detail = " | ".join(parts)

    def row(self) -> dict:
        return {"name": self.name, "passed": self.passed, "chunks_expected": self.chunks_expected,
                "chunks_committed": self.chunks_committed, "chunks_lost": self.chunks_lost,
                "duplicates": self.duplicates, "llm_calls_respent": self.llm_calls_respent, "detail": self.detail,
                "figures": self.figures}



def fleet_env(workdir: Path, fleet: Fleet, max_in_flight: int, database_url: str = "", **fleet_settings) -> Env:
    fleet_file = fleet.write_fleet_file(workdir / f"fleet-{time.monotonic_ns()}.yaml", max_in_flight,
                                        **fleet_settings)
    return Env(workdir, database_url, extra={"CTX_LLM_FLEET_FILE": str(fleet_file)})


# ---------------------------------------------------------------- context (Postgres, work dirs)

class Context:
    """One scenario's working directory, and the bench's Postgres server (started on first use)."""

    pg_server = None
    pg_dir: Path | None = None

    def __init__(self, workdir: Path, backend: str = "duckdb"):
        self.workdir = workdir
        self.backend = backend

    def db_url(self) -> str:
        return self.pg_url() if self.backend == "postgres" else ""

    @classmethod
    def server(cls):
        if cls.pg_server is None:
            import pgserver

            # Not under a 0700 directory: as root, pgserver runs Postgres as its own user.
            cls.pg_dir = Path(tempfile.mkdtemp(prefix="ctx-faults-pg-"))
            cls.pg_server = pgserver.get_server(cls.pg_dir, cleanup_mode="stop")
            cls.pg_server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        return cls.pg_server

    def pg_url(self) -> str:
        import uuid

        server = self.server()
        name = f"f_{uuid.uuid4().hex[:12]}"
        server.psql(f"CREATE DATABASE {name};")
        return server.get_uri().replace("/postgres?", f"/{name}?", 1)

    def restart_postgres(self) -> None:
        from pgserver._commands import pg_ctl

        server = self.server()
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    @classmethod
    def shutdown(cls) -> None:
        if cls.pg_server is not None:
            cls.pg_server.cleanup()
            cls.pg_server = None
            shutil.rmtree(cls.pg_dir, ignore_errors=True)
