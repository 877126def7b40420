"""bench.ingest's summaries and tables: the medians and ratios over a time scale's rounds, the peers'
rows, and the printed tables (the rounds themselves: bench/ingest_rounds.py)."""

from __future__ import annotations

import statistics

from bench import ingest_options
from bench.sim_validity import lag_flag, validity_summary


def median_interval(values: list[float], confidence: float = 0.95, resamples: int = 10_000,
                    seed: int = 0) -> tuple[float, float] | tuple[None, None]:
    """A percentile-bootstrap interval of the median (None, None with fewer than two values)."""
    import random

    if len(values) < 2:
        return None, None
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    tail = (1 - confidence) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1 - tail) * resamples))]


def peer_rows(rounds: list[dict]) -> list[dict]:
    """Per peer, prompt and balancer, medians over the rounds; `over_platform` is the median of each
    round's peer wall over that round's platform wall (both timed from submission; None without a
    platform run), with a 95 % bootstrap interval."""
    keys = list(dict.fromkeys(k for r in rounds for k in r if "/" in k))
    rows = []
    for key in keys:
        name, prompt, balancer = key.split("/")
        runs = [r for r in rounds if key in r]

        def median(field: str, runs=runs, key=key):
            values = [r[key][field] for r in runs if r[key].get(field) is not None]
            return round(statistics.median(values), 3) if values else None

        over = [r[key]["wall_s"] / r["platform"]["wall_s"] for r in runs if "platform" in r]
        idle = [r[key]["idle_while_pending_s"] / r[key]["wall_s"] for r in runs
                if r[key].get("idle_while_pending_s") is not None]
        low, high = median_interval(over)
        rows.append({"name": name, "prompt": prompt, "balancer": balancer, "wall_s": median("wall_s"),
                     "over_platform": round(statistics.median(over), 3) if over else None,
                     "ci_low": round(low, 3) if low is not None else None,
                     "ci_high": round(high, 3) if high is not None else None,
                     "header_tokens_prompt": median("header_tokens_prompt"),
                     "idle_while_pending_s": median("idle_while_pending_s"),
                     "idle_share": round(statistics.median(idle), 4) if idle else None,
                     "headers_s": median("headers_s"), "embed_s": median("embed_s"),
                     "headers_missing": max(r[key]["headers_missing"] for r in runs), "rounds": len(runs)})
    return rows


def summarize(rounds: list[dict]) -> dict:
    summary = mode_medians(rounds)
    summary["model_floor_s"] = next((r[m]["model_floor_s"] for r in rounds for m in r if "model_floor_s" in r[m]),
                                    None)
    summary.update(round_ratios(rounds))
    summary["idle_while_pending_share"] = summary["idle_share"]  # the issue's name for the same figure
    summary.update(last_round_figures(rounds))
    summary["peers"] = peer_rows(rounds)
    summary.update(validity_summary(rounds))  # invalid_rounds: the simulator fell behind (bench/sim_validity.py)
    return summary


def mode_medians(rounds: list[dict]) -> dict:
    """Each mode's figures, medians over the rounds (None where no round has one)."""
    def median(mode: str, field: str):
        values = [r[mode][field] for r in rounds if mode in r and r[mode].get(field) is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        "floor_s": median("floor", "wall_s"),
        "wall_s": median("platform", "wall_s"),
        "legacy_wall_s": median("legacy", "wall_s"),
        "idle_while_pending_s": median("platform", "idle_while_pending_s"),
        "prompt_counter_still_s": median("platform", "prompt_counter_still_s"),
        "floor_prompt_counter_still_s": median("floor", "prompt_counter_still_s"),
        "legacy_idle_while_pending_s": median("legacy", "idle_while_pending_s"),
        "startup_s": median("platform", "startup_s"),
        "submit_to_launch_s": median("platform", "submit_to_launch_s"),
        "tail_s": median("platform", "tail_s"),
        "header_tokens_prompt": median("platform", "header_tokens_prompt"),
        "utilization": median("platform", "utilization"),
        "mean_batch": median("platform", "mean_batch"),
        "mean_batch_occupancy": median("platform", "mean_batch_occupancy"),
        "preemptions": median("platform", "preemptions"),
        "launch_to_commit_s": median("platform", "launch_to_commit_s"),
        "submit_to_first_request_s": median("platform", "submit_to_first_request_s"),
        "request_to_first_request_s": median("platform", "request_to_first_request_s"),
        "events_per_document": median("platform", "events_per_document"),
        "planned_events_per_run_max": median("platform", "planned_events_per_run_max"),
        "cpu_ms_per_event": median("platform", "cpu_ms_per_event"),
        "oracle_floor_s": next((r[m]["oracle_floor_s"] for r in rounds for m in r if "oracle_floor_s" in r[m]), None),
        # The pool alone: the client's CPU per request at the limits it found, its preemptions.
        "floor_client_cpu_ms_per_request": median("floor", "client_cpu_ms_per_request"),
        "floor_preemptions": median("floor", "preemptions"),
        "floor_limits_found": [r["floor"].get("limit_found") for r in rounds if "floor" in r],
    }


def round_ratios(rounds: list[dict]) -> dict:
    """The ratios of the modes' walls within each round (and to the floors), medians over the rounds."""
    ratios = {"wall_over_floor": [], "wall_over_model_floor": [], "floor_over_model_floor": [],
              "legacy_over_platform": [], "idle_share": [], "launch_to_commit_over_model_floor": [],
              "platform_minus_floor_s": [], "wall_over_oracle": [], "floor_over_oracle": []}
    for r in rounds:
        if "platform" in r and "floor" in r:
            ratios["wall_over_floor"].append(r["platform"]["wall_s"] / r["floor"]["wall_s"])
            # What the platform adds to the pool alone in the same round (the issue's 2.5 s budget).
            ratios["platform_minus_floor_s"].append(r["platform"]["wall_s"] - r["floor"]["wall_s"])
        for mode, ratio in (("platform", "wall_over_oracle"), ("floor", "floor_over_oracle")):
            if r.get(mode, {}).get("wall_over_oracle") is not None:
                ratios[ratio].append(r[mode]["wall_over_oracle"])
        for mode, ratio in (("platform", "wall_over_model_floor"), ("floor", "floor_over_model_floor")):
            if r.get(mode, {}).get("wall_over_model_floor") is not None:
                ratios[ratio].append(r[mode]["wall_over_model_floor"])
        if "platform" in r and "legacy" in r:
            ratios["legacy_over_platform"].append(r["legacy"]["wall_s"] / r["platform"]["wall_s"])
        if "platform" in r and r["platform"].get("idle_while_pending_s") is not None:
            ratios["idle_share"].append(r["platform"]["idle_while_pending_s"] / r["platform"]["wall_s"])
        if r.get("platform", {}).get("launch_to_commit_s") and r["platform"].get("model_floor_s"):
            ratios["launch_to_commit_over_model_floor"].append(
                r["platform"]["launch_to_commit_s"] / r["platform"]["model_floor_s"])
    return {name: round(statistics.median(values), 3) if values else None for name, values in ratios.items()}


def last_round_figures(rounds: list[dict]) -> dict:
    """The fleet's shares (the largest errors over the rounds), chunks, runs and timeline of the last
    round's platform, and the stream's and the shared fleet's own figures from it."""
    last = rounds[-1].get("platform", {})
    chunks = next((r[m]["chunks"] for r in rounds for m in r if r[m].get("chunks") is not None), None)
    figures = {"replica_share": last.get("replica_share"), "capacity_share": last.get("capacity_share"),
               # The platform's (the headline's), and the floor's apart: every request at once through
               # the pool is a diagnostic; a peer's own draws are in its round entry.
               "share_max_relative_error": max_share_error(rounds, "platform"),
               "floor_share_max_relative_error": max_share_error(rounds, "floor"),
               "work_share_error": max_share_error(rounds, "platform", "work_share_error"),
               "chunks": last.get("chunks", chunks), "runs_per_backfill": last.get("runs"),
               "timeline": last.get("timeline")}
    # The stream's and the shared fleet's own figures, from the last round.
    figures.update({k: last[k] for k in WORKLOAD_FIGURES if k in last})
    return figures


def max_share_error(rounds: list[dict], mode: str, field: str = "share_max_relative_error") -> float | None:
    """The largest relative gap between a replica's share of requests (or `field`) and its capacity
    share, over the rounds of one mode."""
    return max((r[mode][field] for r in rounds if r.get(mode, {}).get(field) is not None), default=None)


WORKLOAD_FIGURES = ("run_sizes", "run_boundaries", "boundary_gap_s", "boundary_idle_s", "peak_open_requests",
                    "peak_running", "overshoot", "peak_over_cap", "process_wall_s")


def print_table(workload: str, time_scale: float, embed_s: float | None, rounds: list[dict], summary: dict) -> None:
    embedding = "not timed" if embed_s is None else f"{embed_s:.1f} s on this CPU"
    print(f"workload {workload}: {summary['chunks']} chunks; embedding {embedding}; "
          f"fleet time scale {time_scale}")
    nan = float("nan")
    print(f"{'round':>5s} {'model s':>8s} {'floor s':>8s} {'platform s':>11s} {'legacy s':>9s} {'wall/floor':>11s} "
          f"{'wall/model':>11s} {'legacy/plat':>12s} {'idle s':>7s} {'startup s':>10s} {'tail s':>7s} "
          f"{'share err':>10s}")
    for i, r in enumerate(rounds, 1):
        f, p, lg = r.get("floor", {}), r.get("platform", {}), r.get("legacy", {})
        ratio = p["wall_s"] / f["wall_s"] if p and f else nan
        lratio = lg["wall_s"] / p["wall_s"] if p and lg else nan
        model = next((x["model_floor_s"] for x in r.values() if x.get("model_floor_s")), None)
        print(f"{i:5d} {model or nan:8.2f} {f.get('wall_s', nan):8.2f} {p.get('wall_s', nan):11.2f} "
              f"{lg.get('wall_s', nan):9.2f} {ratio:11.3f} {p.get('wall_over_model_floor') or nan:11.3f} "
              f"{lratio:12.3f} {p.get('idle_while_pending_s') or 0:7.1f} {p.get('startup_s') or nan:10.2f} "
              f"{p.get('tail_s') or nan:7.2f} "
              f"{max((x['share_max_relative_error'] for m, x in r.items() if '/' not in m), default=nan):10.3f}"
              f"{lag_flag(r)}")
    print(f"oracle floor {summary['oracle_floor_s']} s: wall/oracle {summary['wall_over_oracle']}, floor/oracle "
          f"{summary['floor_over_oracle']}; platform - floor {summary['platform_minus_floor_s']} s; submission to "
          f"first request {summary['submit_to_first_request_s']} s; events per document "
          f"{summary['events_per_document']}, planned events per run (max) {summary['planned_events_per_run_max']}")
    print(f"median: wall/floor {summary['wall_over_floor']}, wall/model floor {summary['wall_over_model_floor']} "
          f"(floor/model floor {summary['floor_over_model_floor']}), legacy/platform "
          f"{summary['legacy_over_platform']}, idle while pending {summary['idle_while_pending_s']} s "
          f"({summary['idle_share']} of wall), startup {summary['startup_s']} s, "
          f"daemon pick-up {summary['submit_to_launch_s']} s; utilization {summary['utilization']}, mean batch "
          f"{summary['mean_batch']} ({summary['mean_batch_occupancy']} of max_num_seqs), preemptions "
          f"{summary['preemptions']}; simulator lag {summary['sim_max_lag_s']} s, invalid rounds "
          f"{summary['invalid_rounds']}")
    if summary["peers"]:
        print_peers(summary)
    if "run_boundaries" in summary:
        print(f"stream: runs of {summary['run_sizes']} documents; between runs {summary['boundary_gap_s']} s "
              f"without a commit, {summary['boundary_idle_s']} s of them idle while pending")
    if "peak_open_requests" in summary and "process_wall_s" in summary:
        print(f"shared fleet: processes {summary['process_wall_s']} s; peak open requests per replica "
              f"{summary['peak_open_requests']} (cap {ingest_options.OPTIONS.cap}); shares {summary['replica_share']} vs capacity "
              f"{summary['capacity_share']}; work share error {summary['work_share_error']}")


def print_peers(summary: dict) -> None:
    """The peers under the platform, medians over the rounds."""
    print(f"{'':16s} {'prompt':>6s} {'balancer':>10s} {'wall s':>8s} {'over platform':>14s} {'95% CI':>14s} "
          f"{'prompt tokens':>14s} {'idle s':>7s} {'idle share':>11s} {'missing':>8s}")
    rows = [{"name": "platform", "prompt": "ours", "balancer": "pool", "wall_s": summary["wall_s"],
             "over_platform": 1.0 if summary["wall_s"] else None, "ci_low": None, "ci_high": None,
             "header_tokens_prompt": summary["header_tokens_prompt"],
        "idle_while_pending_s": summary["idle_while_pending_s"], "idle_share": summary["idle_share"],
        "headers_missing": None}] + summary["peers"]
    def cell(value, width: int, fmt: str) -> str:
        return ("-" if value is None else format(value, fmt)).rjust(width)

    for row in rows:
        interval = (f"{row['ci_low']:.2f}-{row['ci_high']:.2f}" if row.get("ci_low") is not None else "-").rjust(14)
        print(f"{row['name']:16s} {row['prompt']:>6s} {row['balancer']:>10s} {cell(row['wall_s'], 8, '.2f')} "
              f"{cell(row['over_platform'], 14, '.3f')} {interval} {cell(row['header_tokens_prompt'], 14, ',.0f')} "
              f"{cell(row['idle_while_pending_s'], 7, '.1f')} {cell(row['idle_share'], 11, '.3f')} "
              f"{cell(row['headers_missing'], 8, 'd')}")
