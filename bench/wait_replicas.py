"""``python -m bench.wait_replicas [--jobs 60] [--rounds 3] [--concurrency 16]``: what
``TANDEM_REDIS_WAIT_REPLICAS=1`` costs per round against ``0``, in one sitting.

A throwaway primary and its replica on loopback (``redis-server``, no persistence), one worker per
role on the primary, two OpenAI-compatible test servers answering at once (``bench.models``).
For N = 0, then N = 1, the workers are started with ``TANDEM_REDIS_WAIT_REPLICAS=N``, one job runs
alone (warm-up), then ``--jobs`` dual jobs are sent at once; each has ``--rounds`` rounds of one
``at_most_once`` ``noop`` call, then the round that delivers. Each round with a call waits once
(the call's start mark) and each job once more (its end).

Figures (``name: value`` lines, ``<n>`` the N of the run):

* ``wait<n>_worker_cpu_ms_per_round``: the CPU time of the three worker processes from the first
  submission to the last end, divided by the rounds run;
* ``wait<n>_job_p50_s``, ``wait<n>_job_p99_s``: job times from submission;
* ``wait<n>_waits_per_round``: ``WAIT`` commands the primary ran (``INFO commandstats``), per round;
* ``wait<n>_completed`` / ``wait<n>_jobs``.
"""

from __future__ import annotations

import argparse
import sys

from redis import Redis

from bench.common import ROLES, Cluster, ModelHosts, percentile
from bench.models import call, plan_goal
from bench.scale import cpu_seconds
from tests.integration.redis_sentinel import OwnSentinelGroup


def _waits(redis: Redis) -> int:
    stats = redis.info("commandstats").get("cmdstat_wait")
    return int(stats["calls"]) if stats else 0


def run(
    primary_url: str, primary: Redis, replicas: int, jobs: int, rounds: int, concurrency: int
) -> dict[str, float]:
    """One sitting's figures for ``TANDEM_REDIS_WAIT_REPLICAS=replicas``."""
    primary.flushall()
    goal = plan_goal([[call("noop")] for _ in range(rounds)])
    with ModelHosts(latency=0.0) as hosts:
        cluster = Cluster(
            hosts,
            dict.fromkeys(ROLES, concurrency),
            url=primary_url,
            TANDEM_TOOLKIT="bench.tools:once_toolkit",
            TANDEM_REDIS_WAIT_REPLICAS=str(replicas),
        )
        try:
            cluster.start()
            cluster.run(goal, rounds + 2)  # warm-up
            assert cluster.group is not None
            pids = [p.pid for p in cluster.group.processes.values()]
            cpu0, waits0 = sum(cpu_seconds(p) for p in pids), _waits(primary)
            sent = dict(cluster.submit(goal, rounds + 2) for _ in range(jobs))
            ended = cluster.wait(list(sent), timeout=600)
            cpu1, waits1 = sum(cpu_seconds(p) for p in pids), _waits(primary)
            results = [cluster.result(j) for j in sent]
        finally:
            cluster.stop()
    ran = sum(r.rounds for r in results)
    times = [ended[j].updated_at - sent[j] for j in sent]
    n = replicas
    return {
        f"wait{n}_jobs": jobs,
        f"wait{n}_completed": sum(1 for r in results if r.status == "completed"),
        f"wait{n}_rounds": ran,
        f"wait{n}_worker_cpu_ms_per_round": round((cpu1 - cpu0) * 1000 / max(ran, 1), 2),
        f"wait{n}_job_p50_s": round(percentile(times, 50), 3),
        f"wait{n}_job_p99_s": round(percentile(times, 99), 3),
        f"wait{n}_waits_per_round": round((waits1 - waits0) / max(ran, 1), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wait_replicas", description=__doc__)
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3, help="rounds with an at_most_once call per job")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker")
    args = parser.parse_args(argv)
    pair = OwnSentinelGroup().start_pair()
    try:
        url = f"redis://127.0.0.1:{pair.primary_port}/0"
        primary = Redis.from_url(url)
        figures: dict[str, float] = {}
        for replicas in (0, 1):
            figures.update(run(url, primary, replicas, args.jobs, args.rounds, args.concurrency))
        for name, value in figures.items():
            print(f"{name}: {value}")
        ok = all(figures[f"wait{n}_completed"] == args.jobs for n in (0, 1))
        return 0 if ok else 1
    finally:
        pair.stop()


if __name__ == "__main__":
    sys.exit(main())
