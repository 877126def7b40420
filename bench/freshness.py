"""Freshness: how long a file dropped into the inbox takes to become searchable, daemon already running.

    python -m bench.freshness --drops 10 --json bench/out/freshness.json

`dagster-webserver` and `dagster-daemon` run on a fresh DAGSTER_HOME seeded with the shipped dagster.yaml,
the `new_documents` sensor turned on through GraphQL as the UI does, at the default CTX_INBOX_INTERVAL_S
and CTX_INBOX_SETTLE_S (`--interval-s` / `--settle-s` override them). Once the sensor has ticked and
nothing runs, small Markdown documents holding a unique token (`zqxv1234`) are dropped one at a time
(hidden name, then renamed); after each, the search `ctx search` runs (`service_from_settings(...)
.search`, in this process, same store) is polled every 0.25 s for the token until a hit holds it (180 s
at most: a failure), then a seeded 0-5 s pause, so drops land at random phases of the sensor's tick.

Measured: `drop_to_searchable_s` (each drop, p50, p95, max) and per drop, seconds after it: `tick` (the
sensor tick that requested its run), `created`, `launched` (RUN_STARTING), `started` (RUN_START: the
run worker is up), `committed` (`chunk_embeddings` materialized), `searchable`; and the gaps between the
sensor's ticks. `--headers structural` (default: no fleet, the orchestration path alone) or `openai`
(the simulated fleet, time scale 1); `--embedder remote` (default: a simulated GPU server) or `local`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import string
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

from bench.report import write_json

SEARCH_TIMEOUT_S, POLL_S, MAX_GAP_S = 180.0, 0.25, 5.0  # per drop; between searches; most pause between drops
PHASES = ("tick", "created", "launched", "started", "committed", "searchable")
SENSOR = "new_documents"
_WORDS = ("inbox", "report", "ledger", "schedule", "sensor", "valve", "reading", "incident", "review", "budget",
          "payment", "delivery", "warranty", "inspection", "record", "quarter", "region", "policy", "service")


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered, pos = sorted(values), (len(values) - 1) * q / 100
    lo, hi = int(pos), min(int(pos) + 1, len(values) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values: list[float | None]) -> dict[str, Any]:
    """p50, p95 and max over the drops that became searchable; `values` keeps a None per failure."""
    done = [v for v in values if v is not None]
    figures = {"p50": percentile(done, 50), "p95": percentile(done, 95), "max": max(done, default=None)}
    rounded = {name: (round(x, 2) if x is not None else None) for name, x in figures.items()}
    return {**rounded, "values": values, "failed": len(values) - len(done)}


def gap_summary(gaps: list[float], interval_s: float) -> dict[str, Any]:
    """Percentiles of the gaps between ticks, and how many exceed 1.5 x the interval (a tick skipped)."""
    figures = {k: v for k, v in summarize(list(gaps)).items() if k != "failed"}
    return {**figures, "over_interval": sum(g > 1.5 * interval_s for g in gaps)}


def breakdown(dropped: float, times: dict[str, float | None]) -> dict[str, float | None]:
    """Each phase's wall-clock time as seconds after the drop (None where it never happened)."""
    return {phase: (round(times[phase] - dropped, 2) if times.get(phase) is not None else None)
            for phase in PHASES}


def unique_token(rng: random.Random) -> str:
    """A word no document has: four letters and four digits, e.g. `zqxv1234`."""
    return "".join(rng.choices(string.ascii_lowercase, k=4)) + f"{rng.randrange(10000):04d}"


def document_text(title: str, token: str, rng: random.Random) -> str:
    """A small Markdown document: a title, two sections of two paragraphs, the token in the first."""
    def paragraph() -> str:
        return " ".join(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(10, 16))).capitalize() + "."
                        for _ in range(3))

    first = paragraph().split(" ")
    first.insert(rng.randrange(1, len(first)), token)
    return "\n".join([f"# {title}\n", "## 1. Summary\n", " ".join(first) + "\n", paragraph() + "\n",
                      "## 2. Details\n", paragraph() + "\n", paragraph() + "\n"])


def drop_document(inbox: Path, name: str, text: str) -> float:
    """Written under a hidden name (the sensor skips those), then renamed; the wall-clock drop time."""
    hidden = inbox / f".{name}.part"
    hidden.write_text(text)
    os.replace(hidden, inbox / name)
    return time.time()


SENSOR_TICKS = """
query ($selector: SensorSelector!, $limit: Int) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(limit: $limit) { status timestamp runIds } } }
  }
}
"""


@dataclass(frozen=True)
class Tick:
    status: str  # STARTED, SKIPPED, SUCCESS, FAILURE
    timestamp: float
    run_ids: tuple[str, ...]


def sensor_ticks(deployment, limit: int = 100) -> list[Tick]:
    """The `new_documents` sensor's ticks, newest first, as the UI's tick history reads them."""
    from bench.ingest import SENSOR_SELECTOR

    found = deployment.graphql(SENSOR_TICKS, {"selector": SENSOR_SELECTOR, "limit": limit})["sensorOrError"]
    if found["__typename"] != "Sensor":
        raise SystemExit(f"the {SENSOR} sensor is not loaded: {found}")
    return [Tick(t["status"], t["timestamp"], tuple(t["runIds"])) for t in found["sensorState"]["ticks"]]


def wait_first_tick(instance, ticks: Callable[..., list[Tick]], alive: Callable[[], None],
                    timeout_s: float = 180) -> None:
    """Until the sensor has finished a tick and no run is queued or in progress."""
    import dagster as dg

    busy = dg.RunsFilter(statuses=[getattr(dg.DagsterRunStatus, s) for s in ("QUEUED", "STARTING", "STARTED")])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive()
        if any(t.status != "STARTED" for t in ticks()) and not instance.get_runs(busy):
            return
        time.sleep(0.5)
    raise SystemExit(f"the {SENSOR} sensor did not tick within {timeout_s} s")


def tick_gaps(ticks: Callable[..., list[Tick]]) -> list[float]:
    """Seconds between tick starts (Dagster's sensor loop wakes every 5 s, skips a sensor under its interval)."""
    starts = sorted(t.timestamp for t in ticks(limit=1000))
    return [round(b - a, 2) for a, b in itertools.pairwise(starts)]


def run_times(instance, ticks: Callable[..., list[Tick]], dropped: float) -> dict[str, float | None]:
    """The inbox run created after the drop: its tick, creation, launch, start and first commit."""
    import dagster as dg

    records = instance.get_run_records(filters=dg.RunsFilter(
        tags={"ctx/trigger": "inbox"}, created_after=datetime.fromtimestamp(dropped, tz=UTC)),
        order_by="create_timestamp", ascending=True, limit=1)
    if not records:
        return {}
    run_id = records[0].dagster_run.run_id
    events: dict = {}
    for entry in instance.all_logs(run_id, of_type={dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.RUN_START}):
        events.setdefault(entry.dagster_event.event_type, entry.timestamp)
    commits = [r.timestamp for r in instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey("chunk_embeddings"), after_timestamp=dropped), limit=100).records if r.run_id == run_id]
    requested = [t.timestamp for t in ticks() if run_id in t.run_ids]
    return {"run_id": run_id, "tick": min(requested, default=None), "created": records[0].create_timestamp.timestamp(),
            "launched": events.get(dg.DagsterEventType.RUN_STARTING),
            "started": events.get(dg.DagsterEventType.RUN_START), "committed": min(commits, default=None)}


def search_finds(service, token: str) -> bool:
    """Whether `ctx search TOKEN` (the default hybrid mode, k 5) returns a chunk holding the token."""
    from contextual_assets.serving.api import SearchRequest
    from contextual_assets.serving.service import SearchError

    try:
        response = service.search(SearchRequest(query=token, k=5))
    except SearchError:  # no version holds chunks yet
        return False
    return any(token in hit.text for hit in response.hits)


def wait_searchable(service, token: str, alive: Callable[[], None],
                    timeout_s: float = SEARCH_TIMEOUT_S) -> tuple[float | None, int]:
    """(wall-clock time of the first search that found the token or None after `timeout_s`, polls)."""
    deadline, polls = time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        polls += 1
        if search_finds(service, token):
            return time.time(), polls
        alive()
        time.sleep(POLL_S)
    return None, polls


def platform_env(root: Path, home: Path, args: argparse.Namespace, extra: dict[str, str]) -> dict[str, str]:
    """The deployment's environment: structural headers unless `extra` says otherwise, the overrides."""
    from bench.sim.deployment import deployment_env

    settings = {"CTX_HOME": str(root / ".ctx"), "CTX_INBOX": str(root / "inbox"),
                "CTX_DUCKDB_PATH": str(root / "index.duckdb"), "CTX_HEADER_SOURCE": "structural", **extra}
    overrides = {"CTX_INBOX_INTERVAL_S": args.interval_s, "CTX_INBOX_SETTLE_S": args.settle_s}
    settings.update({name: str(value) for name, value in overrides.items() if value is not None})
    return deployment_env(home, **settings)


def drop_all(instance, ticks: Callable[..., list[Tick]], service, inbox: Path, alive: Callable[[], None],
             drops: int, seed: int) -> list[dict]:
    """Each drop, waited for until searchable, then a random 0-5 s pause: one entry per drop."""
    rng = random.Random(seed)
    entries = []
    for i in range(drops):
        token = unique_token(rng)
        dropped = drop_document(inbox, f"fresh_{i + 1:03d}.md", document_text(f"Freshness note {i + 1}", token, rng))
        searchable, polls = wait_searchable(service, token, alive)
        times = {**run_times(instance, ticks, dropped), "searchable": searchable}
        entries.append({"drop": i + 1, "token": token, "run_id": times.get("run_id"), "polls": polls,
                        "drop_to_searchable_s": round(searchable - dropped, 2) if searchable else None,
                        **breakdown(dropped, times)})
        print(f"drop {i + 1}: {entries[-1]['drop_to_searchable_s']} s", flush=True)
        time.sleep(rng.uniform(0, MAX_GAP_S))
    return entries


def check_alive(deployment) -> None:
    """A webserver or daemon that exited ends the bench, with its log."""
    for name, proc, _ in deployment.processes:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with {proc.returncode}\n{deployment.logs()[-5000:]}")


def measure(workdir: Path, args: argparse.Namespace) -> tuple[list[dict], dict[str, Any], list[float]]:
    """Deployment up, drops measured, all stopped: (entries, effective settings, the sensor's tick gaps)."""
    import dagster as dg

    from bench import ingest, ingest_options
    from bench.sim.deployment import DagsterDeployment
    from contextual_assets.serving.service import service_from_settings
    from contextual_assets.settings import PlatformSettings

    root = workdir / f"freshness-{time.monotonic_ns()}"
    (root / "inbox").mkdir(parents=True)
    with ExitStack() as stack:  # stopped in reverse order, whatever failed
        stack.callback(setattr, ingest_options, "OPTIONS", ingest_options.OPTIONS)
        ingest_options.OPTIONS = ingest.BenchOptions(embedder=args.embedder)
        fleet = ingest.start_fleet(workdir, 1.0) if args.headers == "openai" else None
        if fleet is not None:
            stack.callback(fleet.stop)
        embed = ingest.EmbedServer(workdir, 1.0)
        stack.callback(embed.stop)
        dagster_home = ingest.BenchDagsterHome(root / "dagster_home")
        stack.callback(dagster_home.stop)
        env = platform_env(root, dagster_home.home, args, {**embed.env(), **dagster_home.env,
                                                           **(ingest.fleet_settings(fleet) if fleet else {})})
        with mock.patch.dict(os.environ, env, clear=True):  # exactly the deployment's settings
            settings = PlatformSettings.from_env()
        instance = dg.DagsterInstance.from_config(str(dagster_home.home))
        stack.callback(instance.dispose)
        deployment = DagsterDeployment(root=root, env=env)
        stack.callback(deployment.stop_all)
        service = service_from_settings(settings)  # creates the store before the daemon's first tick
        stack.callback(service.store.close)
        search_finds(service, "warmup")  # computes the fallback version (nothing to find yet)
        service.embedders.get().embed(["warm up"])  # the query embedder loaded, as a running service has it
        deployment.start_webserver()
        ingest.start_sensor(deployment)
        deployment.start_daemon()
        alive = partial(check_alive, deployment)
        ticks = partial(sensor_ticks, deployment)
        wait_first_tick(instance, ticks, alive)
        entries = drop_all(instance, ticks, service, root / "inbox", alive, args.drops, args.seed)
        gaps = tick_gaps(ticks)
    return entries, {"inbox_interval_s": settings.inbox_interval_s, "inbox_settle_s": settings.inbox_settle_s}, gaps


def print_table(entries: list[dict], summary: dict, ticks: dict, interval_s: float) -> None:
    """One row per drop (seconds after it), then the percentiles and the sensor's tick gaps."""
    print(f"{'drop':>4s} {'token':>9s} " + " ".join(f"{p:>10s}" for p in PHASES) + f" {'polls':>6s}")
    for e in entries:
        cells = " ".join(f"{e[p]:10.2f}" if e[p] is not None else f"{'-':>10s}" for p in PHASES)
        print(f"{e['drop']:4d} {e['token']:>9s} {cells} {e['polls']:6d}")
    print(f"drop_to_searchable_s: p50 {summary['p50']} s, p95 {summary['p95']} s, max {summary['max']} s, "
          f"{summary['failed']} failed of {len(entries)}")
    print(f"sensor tick gaps: p50 {ticks['p50']} s, max {ticks['max']} s; {ticks['over_interval']} of "
          f"{len(ticks['values'])} over 1.5 x the {interval_s} s interval (a sensor-loop pass skipped)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drops", type=int, default=10, help="documents dropped, one at a time")
    parser.add_argument("--headers", choices=("structural", "openai"), default="structural",
                        help="structural (no fleet) or openai (the simulated fleet, time scale 1)")
    parser.add_argument("--embedder", choices=("remote", "local"), default="remote",
                        help="remote: a simulated GPU embedding server; local: MiniLM on this CPU")
    parser.add_argument("--interval-s", type=int, default=None, help="override CTX_INBOX_INTERVAL_S (default: none)")
    parser.add_argument("--settle-s", type=float, default=None, help="override CTX_INBOX_SETTLE_S (default: none)")
    parser.add_argument("--seed", type=int, default=0, help="tokens, texts and the pauses between drops")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.interval_s is not None and args.interval_s < 5:
        parser.error("--interval-s: at least 5 (CTX_INBOX_INTERVAL_S; Dagster's sensor loop passes every 5 s)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from contextual_assets.settings import PlatformSettings

    defaults = {name: PlatformSettings.default(name) for name in ("inbox_interval_s", "inbox_settle_s")}
    with tempfile.TemporaryDirectory(prefix="bench-freshness-") as tmp:
        entries, effective, gaps = measure(args.workdir or Path(tmp), args)
    summary = summarize([e["drop_to_searchable_s"] for e in entries])
    ticks = gap_summary(gaps, effective["inbox_interval_s"])
    print_table(entries, summary, ticks, effective["inbox_interval_s"])
    settings = {**effective, "defaults": defaults, "overridden": effective != defaults}
    write_json(args.json, {"drops": len(entries), "drop_to_searchable_s": summary, "breakdown": entries,
                           "sensor_tick_gaps_s": ticks, "settings": settings,
                           "machine": f"{os.cpu_count()} cores", "headers": args.headers, "embedder": args.embedder,
                           "time_scale": 1.0, "seed": args.seed, "poll_s": POLL_S})
    return 0


if __name__ == "__main__":
    sys.exit(main())
