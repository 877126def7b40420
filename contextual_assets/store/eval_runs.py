"""Evaluation results: one row per run (metrics, gate decision), one per task, and one per document
partition of a candidate (what it was evaluated against, and its per-document verdict)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from .backend import Backend, utc_now, write_transaction


class EvalRuns(Protocol):
    """Stored evaluation runs, their per-task results and the gate's decision."""

    def save(self, run: dict[str, Any], tasks: Sequence[dict[str, Any]]) -> None: ...
    def set_gate(self, run_id: str, gate: dict[str, Any]) -> None: ...
    def latest(self, index_version: str, evaluator_id: str | None = None) -> dict[str, Any] | None: ...
    def get(self, run_id: str) -> dict[str, Any] | None: ...
    def tasks(self, run_id: str) -> list[dict[str, Any]]: ...
    def save_documents(self, records: Sequence[dict[str, Any]]) -> None: ...
    def documents(self, index_version: str) -> dict[str, dict[str, Any]]: ...


_RUN_COLUMNS = "run_id, index_version, evaluator_id, evaluator, gold_sha256, created_at, metrics, gate"
_DOCUMENT_COLUMNS = ("index_version", "doc_id", "run_id", "baseline_run_id", "production_version", "basis",
                     "task_ids", "passed", "reasons", "metrics", "evaluated_at")
_DOCUMENT_JSON = ("basis", "task_ids", "reasons", "metrics")
_TASK_COLUMNS = ("task_id", "mode", "status", "first_rank", "pass_at_5", "pass_at_10", "pass_at_20", "reciprocal_rank",
                 "ndcg_at_10")


class EvalRunTable:
    """`ctx_eval_runs` and `ctx_eval_tasks`."""

    def __init__(self, backend: Backend):
        self._backend = backend

    @write_transaction
    def save(self, run: dict[str, Any], tasks: Sequence[dict[str, Any]]) -> None:
        """Store one evaluation run and its per-task results in one transaction."""
        db = self._backend
        with db.transaction() as cur:
            db.exec(cur, f"INSERT INTO ctx_eval_runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (run["run_id"], run["index_version"], run["evaluator_id"], json.dumps(run["evaluator"]),
                     run["gold_sha256"], utc_now(), json.dumps(run["metrics"]), json.dumps(run.get("gate"))))
            for t in tasks:
                db.exec(cur, f"INSERT INTO ctx_eval_tasks (run_id, {', '.join(_TASK_COLUMNS)}) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (run["run_id"], *(t[c] for c in _TASK_COLUMNS)))

    @write_transaction
    def set_gate(self, run_id: str, gate: dict[str, Any]) -> None:
        """Record the promotion gate's decision on a stored run."""
        with self._backend.transaction() as cur:
            self._backend.exec(cur, "UPDATE ctx_eval_runs SET gate = ? WHERE run_id = ?", (json.dumps(gate), run_id))

    def latest(self, index_version: str, evaluator_id: str | None = None) -> dict[str, Any] | None:
        """The newest run for an index version (optionally of one evaluator), or None."""
        sql = f"SELECT {_RUN_COLUMNS} FROM ctx_eval_runs WHERE index_version = ?"
        params: list[Any] = [index_version]
        if evaluator_id is not None:
            sql += " AND evaluator_id = ?"
            params.append(evaluator_id)
        rows = self._backend.query(sql + " ORDER BY created_at DESC, run_id DESC LIMIT 1", params)
        return _run_of(rows[0]) if rows else None

    def get(self, run_id: str) -> dict[str, Any] | None:
        """One evaluation run by its id, or None."""
        rows = self._backend.query(f"SELECT {_RUN_COLUMNS} FROM ctx_eval_runs WHERE run_id = ?", (run_id,))
        return _run_of(rows[0]) if rows else None

    def tasks(self, run_id: str) -> list[dict[str, Any]]:
        """Per-task results of one run, ordered by mode and task id."""
        rows = self._backend.query(f"SELECT {', '.join(_TASK_COLUMNS)} FROM ctx_eval_tasks WHERE run_id = ? "
                                   "ORDER BY mode, task_id", (run_id,))
        return [dict(zip(_TASK_COLUMNS, r)) for r in rows]

    @write_transaction
    def save_documents(self, records: Sequence[dict[str, Any]]) -> None:
        """Replace the per-document evaluation records of (candidate, document) pairs, in one transaction."""
        db = self._backend
        with db.transaction() as cur:
            for record in records:
                db.exec(cur, "DELETE FROM ctx_eval_documents WHERE index_version = ? AND doc_id = ?",
                        (record["index_version"], record["doc_id"]))
                values = [json.dumps(record[c], sort_keys=True) if c in _DOCUMENT_JSON else record[c]
                          for c in _DOCUMENT_COLUMNS[:-1]]
                db.exec(cur, f"INSERT INTO ctx_eval_documents ({', '.join(_DOCUMENT_COLUMNS)}) "
                        f"VALUES ({', '.join('?' * len(_DOCUMENT_COLUMNS))})", (*values, utc_now()))

    def documents(self, index_version: str) -> dict[str, dict[str, Any]]:
        """{document: its latest evaluation record} for one candidate version."""
        rows = self._backend.query(f"SELECT {', '.join(_DOCUMENT_COLUMNS)} FROM ctx_eval_documents "
                                   "WHERE index_version = ?", (index_version,))
        records = {}
        for row in rows:
            record = dict(zip(_DOCUMENT_COLUMNS, row))
            record.update({c: json.loads(record[c]) for c in _DOCUMENT_JSON})
            record["passed"] = bool(record["passed"])
            records[record["doc_id"]] = record
        return records


def _run_of(r: tuple) -> dict[str, Any]:
    return {"run_id": r[0], "index_version": r[1], "evaluator_id": r[2], "evaluator": json.loads(r[3]),
            "gold_sha256": r[4], "created_at": r[5], "metrics": json.loads(r[6]),
            "gate": json.loads(r[7]) if r[7] else None}
