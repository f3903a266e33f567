"""Chaos figures (issue 11): dual jobs with tools on 2 workers per role while a random worker is
SIGKILLed and replaced every 3 to 5 s and Redis (a server of this run, AOF on) restarts once.

Figures: ``chaos_jobs``, ``chaos_kills``, ``chaos_redis_restarts``, ``chaos_completed``,
``chaos_duplicate_tool_runs`` (an ``at_most_once`` call run more than once), ``chaos_duplicate_messages``,
``chaos_stuck_jobs`` (not ended when the run stops), ``chaos_keys_without_ttl``, ``chaos_seconds``,
and ``chaos_kill_to_progress_p50_s`` / ``_p99_s`` / ``_max_s``: for every kill, the time until each
job that was running at the kill next progressed (its record changed), over all kills and jobs: an
upper bound for the jobs whose step the killed worker held (the goal: p99 under 2 ×
``TANDEM_LEASE_SECONDS``, here 2 s). Run alone with ``python -m bench.chaos``.
"""

from __future__ import annotations

import sys

from bench.common import percentile
from tests.integration.chaos import CHAOS_ENV, OwnRedis, run_chaos
from tests.integration.conftest import _cluster_on

LEASE_SECONDS = float(CHAOS_ENV["TANDEM_LEASE_SECONDS"])


def chaos(quick: bool = False) -> dict[str, float]:
    """Run the chaos scenario once and return its figures."""
    jobs = 15 if quick else 40
    server = OwnRedis().start()
    try:
        gen = _cluster_on(f"{server.base}/0", **CHAOS_ENV)
        cluster, _thinker, _actor = next(gen)
        try:
            stats = run_chaos(cluster, server, jobs=jobs, limit=120 if quick else 240)
        finally:
            gen.close()
    finally:
        server.stop()
    rec = stats.recoveries
    figures = {
        "chaos_jobs": float(stats.jobs),
        "chaos_kills": float(stats.kills),
        "chaos_redis_restarts": float(stats.redis_restarts),
        "chaos_completed": float(stats.completed),
        "chaos_duplicate_tool_runs": float(stats.duplicate_tool_runs),
        "chaos_duplicate_messages": float(stats.duplicate_messages),
        "chaos_stuck_jobs": float(stats.stuck),
        "chaos_keys_without_ttl": float(len(stats.keys_without_ttl)),
        "chaos_seconds": round(stats.seconds, 1),
        "chaos_kill_to_progress_p50_s": round(percentile(rec, 50), 2),
        "chaos_kill_to_progress_p99_s": round(percentile(rec, 99), 2),
        "chaos_kill_to_progress_max_s": round(max(rec, default=float("nan")), 2),
        "chaos_lease_seconds": LEASE_SECONDS,
    }
    for line in stats.failures:
        print(f"# chaos failure: {line}", flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    """Print the chaos figures, one ``name: value`` line each."""
    args = sys.argv[1:] if argv is None else argv
    for name, value in chaos(quick="--quick" in args).items():
        print(f"{name}: {value:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
