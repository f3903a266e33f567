"""Chaos figures (issue 11): dual jobs with tools on 2 workers per role while a random worker is
SIGKILLed and replaced every 3 to 5 s and Redis (a server of this run, AOF on) restarts once.

Figures: ``chaos_jobs``, ``chaos_kills``, ``chaos_redis_restarts``, ``chaos_completed``,
``chaos_duplicate_tool_runs`` (an ``at_most_once`` call run more than once), ``chaos_duplicate_messages``,
``chaos_stuck_jobs`` (not ended when the run stops), ``chaos_keys_without_ttl``, ``chaos_seconds``, and
the time from a kill to the next progress of the jobs it hit:

- ``chaos_affected_jobs``: over all kills, the jobs whose work the killed worker **held** (a step or a
  tool call under its lease) or had **reserved** (a step message it had taken from the queue but not
  started; ``chaos_affected_reserved_jobs`` of them); see ``tests.integration.takeover``;
- ``chaos_kill_to_progress_p50_s`` / ``_p99_s`` / ``_max_s``: for each affected job, the time from the
  kill until another worker had taken over all of that job's work (claimed its step or call again,
  or the job moved past it). The goal: p99 under 2 × ``TANDEM_LEASE_SECONDS`` (here 2 s).
  ``chaos_kill_to_progress_without_restart_p99_s`` leaves out the jobs next to the Redis restart
  (still waiting for their takeover when it began, or killed less than 6 s after it began: they wait
  out the restart and the workers' reconnection too);
  ``chaos_kill_to_progress_held_p99_s`` counts only jobs whose work was held (taken over after the
  lease), ``chaos_kill_to_progress_reserved_max_s`` the jobs with reserved work (sent again after
  ``TANDEM_STALL_SECONDS``, here 4 s: nothing tells a message a dead worker took from one still queued);
- ``chaos_live_jobs_next_progress_p50_s`` / ``_p99_s``: the earlier, looser figure: for each kill,
  every job live then (hit or not) until its record next changed; it counts jobs that were only
  queued behind others, so it measures the backlog more than the takeover.

``--runs N`` repeats the run with N seeds and pools the figures (a run has 4 to 7 kills, and many
kills hit a replacement still starting, which holds nothing). Run alone: ``python -m bench.chaos``.

The workers keep kombu's "unacked" copy of every message (``TANDEM_BROKER_ACK_EMULATION=true``):
that copy is how this benchmark sees the messages a killed worker had *reserved*. By default a
worker holds its step messages in memory only (``tandem.broker_config.transport``), where a
killed worker's reserved messages are recovered the same way (the reconciler sends the step again
after ``TANDEM_STALL_SECONDS``) but cannot be seen from Redis; ``--default-transport`` runs that
configuration (its takeover figures then count held work only; the other figures are unchanged).
"""

from __future__ import annotations

import sys

from bench.common import percentile
from tests.integration.chaos import CHAOS_ENV, ChaosStats, OwnRedis, run_chaos
from tests.integration.conftest import _cluster_on
from tests.integration.takeover import Affected

LEASE_SECONDS = float(CHAOS_ENV["TANDEM_LEASE_SECONDS"])


def _run(jobs: int, limit: float, seed: int, default_transport: bool = False) -> ChaosStats:
    server = OwnRedis().start()
    env = dict(CHAOS_ENV) if default_transport else {**CHAOS_ENV, "TANDEM_BROKER_ACK_EMULATION": "true"}
    try:
        gen = _cluster_on(f"{server.base}/0", **env)
        cluster, _thinker, _actor = next(gen)
        try:
            return run_chaos(cluster, server, jobs=jobs, limit=limit, seed=seed)
        finally:
            gen.close()
    finally:
        server.stop()


def _describe(a: Affected, started: float) -> str:
    took = "never" if a.taken_over_at is None else f"{a.taken_over_at - a.killed_at:.2f} s"
    units = ", ".join(
        f"{u.kind}{':' + str(u.index) if u.index else ''}@r{u.round}"
        + (" reserved" if u.reserved else f" lease left {u.lease_left:.2f} s")
        for u in a.units
    )
    restart = " (next to the Redis restart)" if a.restart_between else ""
    return f"# kill at +{a.killed_at - started:.1f} s: {a.job} [{units}] taken over in {took}{restart}"


def chaos(
    quick: bool = False, detail: bool = False, runs: int = 1, default_transport: bool = False
) -> dict[str, float]:
    """Run the chaos scenario ``runs`` times and return the pooled figures (``detail``: print each
    affected job; ``default_transport``: see the module docstring)."""
    jobs = 15 if quick else 40
    totals: dict[str, float] = {}
    live: list[float] = []
    took: list[float] = []
    calm: list[float] = []
    held: list[float] = []
    kept: list[float] = []
    affected = reserved = pending = 0
    for n in range(runs):
        stats = _run(jobs, 120 if quick else 240, seed=11 + n, default_transport=default_transport)
        counts = {
            "chaos_jobs": stats.jobs,
            "chaos_kills": stats.kills,
            "chaos_redis_restarts": stats.redis_restarts,
            "chaos_completed": stats.completed,
            "chaos_duplicate_tool_runs": stats.duplicate_tool_runs,
            "chaos_duplicate_messages": stats.duplicate_messages,
            "chaos_stuck_jobs": stats.stuck,
            "chaos_keys_without_ttl": len(stats.keys_without_ttl),
            "chaos_seconds": stats.seconds,
        }
        for name, value in counts.items():
            totals[name] = totals.get(name, 0.0) + float(value)
        hit = stats.takeovers.ended + stats.takeovers.pending
        affected += len(hit)
        reserved += sum(1 for a in hit if a.reserved)
        pending += len(stats.takeovers.pending)
        live += stats.recoveries
        took += stats.takeovers.seconds()
        calm += stats.takeovers.seconds(with_restart=False)
        held += stats.takeovers.seconds(reserved=False)
        kept += stats.takeovers.seconds(reserved=True)
        if detail:
            for a in hit:
                print(_describe(a, stats.started), flush=True)
        for line in stats.failures:
            print(f"# chaos failure: {line}", flush=True)
        for key in stats.keys_without_ttl:
            print(f"# chaos key without TTL: {key}", flush=True)
    return {
        **{k: round(v, 1) for k, v in totals.items()},
        "chaos_runs": float(runs),
        "chaos_affected_jobs": float(affected),
        "chaos_affected_reserved_jobs": float(reserved),
        "chaos_affected_not_taken_over": float(pending),
        "chaos_kill_to_progress_p50_s": round(percentile(took, 50), 2),
        "chaos_kill_to_progress_p99_s": round(percentile(took, 99), 2),
        "chaos_kill_to_progress_max_s": round(max(took, default=float("nan")), 2),
        "chaos_kill_to_progress_without_restart_p99_s": round(percentile(calm, 99), 2),
        "chaos_kill_to_progress_held_p99_s": round(percentile(held, 99), 2),
        "chaos_kill_to_progress_reserved_max_s": round(max(kept, default=float("nan")), 2),
        "chaos_live_jobs_next_progress_p50_s": round(percentile(live, 50), 2),
        "chaos_live_jobs_next_progress_p99_s": round(percentile(live, 99), 2),
        "chaos_lease_seconds": LEASE_SECONDS,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the chaos figures, one ``name: value`` line each (``--quick``, ``--detail``,
    ``--runs N``, ``--default-transport``)."""
    args = sys.argv[1:] if argv is None else argv
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 1
    default = "--default-transport" in args
    figures = chaos(quick="--quick" in args, detail="--detail" in args, runs=runs, default_transport=default)
    for name, value in figures.items():
        print(f"{name}: {value:g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
