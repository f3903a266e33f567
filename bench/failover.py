"""``python -m bench.failover [--kills 3] [--jobs 12] [--rounds 4]``: a Redis failover under load,
with ``TANDEM_REDIS_WAIT_REPLICAS=0`` and ``=1``.

A primary, its replica and three Sentinels on loopback (``tests.integration.redis_sentinel``:
``down-after-milliseconds`` 1000), the broker, the result backend and the job state all on
``redis+sentinel://``; one worker per role, two OpenAI-compatible test servers answering at once
(``bench.models``), ``TANDEM_LEASE_SECONDS=2`` and ``TANDEM_STALL_SECONDS=3`` (as the failover
tests). For each N, ``--kills`` times: ``--jobs`` jobs are submitted (``tandem.client.submission``),
each of ``--rounds`` rounds of one ``at_most_once`` ``charge`` (0.2 s, recorded in a database of
the shared plain Redis held for the run, outside the failover); once the charges run, the master
is SIGKILLed; once the Sentinels agree on the new master, the old one is started again (it comes
back as a replica, as a supervisor would restart it) and every job is waited for. The kills
alternate between the two data nodes. Bounded: ``--kills`` <= 10, ``--jobs`` <= 100, every wait
has a timeout.

Figures (``name: value`` lines, ``<n>`` the N of the run):

* ``wait<n>_first_commit_p50_s``/``_p99_s``: per kill, seconds from the master's death (the
  SIGKILLed process reaped) to the first committed step on the new master: the earliest entry of
  any job's event stream written after the death (a stream entry's id is the master's clock in ms,
  and every step's commit appends its events);
* ``wait<n>_job_resume_p50_s``/``_p99_s``: the same per job (each job running at the kill, its
  first event after the death), over every kill;
* ``wait<n>_switch_p50_s``: the second measure, independent of tandem: seconds from the death to
  the first ``+switch-master`` line in the Sentinels' logs; ``wait<n>_commit_after_switch_p50_s``
  is the first commit's delay after it (never negative: a commit before the switch would mean the
  first measure is wrong);
* ``wait<n>_completed``, ``wait<n>_lost`` (``JobLostError``, with its reason), ``wait<n>_other``
  (ended otherwise), of ``wait<n>_jobs``;
* ``wait<n>_duplicates``: ``at_most_once`` calls that ran more than once;
* ``wait<n>_workers_exited``: workers that exited by themselves (0 expected).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from redis import Redis

from bench.common import REDIS_BASE, ROLES, Cluster, ModelHosts, percentile
from bench.models import call, plan_goal
from tandem.client.submission import submit
from tandem.tasks.errors import JobLostError
from tests.integration.conftest import _exclusive_db
from tests.integration.redis_sentinel import OwnSentinelGroup

JOB_SECONDS = 300.0
"""How long one kill's jobs may take to end, in all (a bound, not an expectation)."""
_SWITCH = re.compile(r"^\d+:X (\d+ \w+ \d+ \d+:\d+:\d+\.\d+) [#*-] \+switch-master ", re.M)


def _until(ready: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {seconds:g} s waiting for {what}")
        time.sleep(0.02)


def _in_sync(group: OwnSentinelGroup) -> bool:
    master = group.agreed_master()
    if master is None:
        return False
    replica = group.replica_port if master == group.primary_port else group.primary_port
    info = group.node(replica).info("replication")
    return info.get("master_link_status") == "up" and not int(info.get("master_sync_in_progress", 1))


def switch_times(group: OwnSentinelGroup, after: float) -> list[float]:
    """The times (epoch seconds) of the ``+switch-master`` lines the Sentinels logged after ``after``."""
    found = []
    for port in group.sentinel_ports:
        log = Path(group.dir / f"sentinel-{port}.log")
        for stamp in _SWITCH.findall(log.read_text(errors="replace") if log.exists() else ""):
            day, _, frac = stamp.partition(".")
            at = time.mktime(time.strptime(day, "%d %b %Y %H:%M:%S")) + float(f"0.{frac}")
            if at >= after - 0.001:
                found.append(at)
    return sorted(found)


def first_commits(cluster: Cluster, job_ids: list[str], after: float) -> dict[str, float]:
    """Each job's first event-stream entry written after ``after`` (epoch seconds), by its id."""
    since = f"{int(after * 1000) + 1}-0"
    out = {}
    for job_id in job_ids:
        entries = cluster.redis.xrange(cluster.store.key(job_id, "events"), min=since, count=1)
        if entries:
            out[job_id] = int(entries[0][0].decode().partition("-")[0]) / 1000
    return out


def one_kill(cluster: Cluster, group: OwnSentinelGroup, calls: Redis, jobs: int, rounds: int) -> dict:
    """Submit ``jobs``, SIGKILL the master once their charges run, bring it back as a replica,
    wait for every job; what happened."""
    # A replica that has not finished its first sync would be promoted empty (every job lost):
    # each kill starts from a replica in sync, as a healthy pair is.
    _until(lambda: _in_sync(group), 120, "the replica to be in sync")
    goal = plan_goal([[call("charge", seconds=0.2)] for _ in range(rounds)], "failover job")
    handles = [
        submit({"goal": goal, "max_rounds": rounds + 2}, app=cluster.app, store=cluster.store)
        for _ in range(jobs)
    ]
    ids = {h.id for h in handles}
    _until(
        lambda: sum(json.loads(c)["job"] in ids for c in calls.lrange("bench:charges", 0, -1)) >= jobs,
        60,
        "the charges to run",
    )
    doomed = group.agreed_master()
    assert doomed is not None
    heir = group.replica_port if doomed == group.primary_port else group.primary_port
    link = group.node(heir).info("replication")
    group.kill(doomed)
    died = time.time()
    _until(lambda: group.agreed_master() == heir, 60, "the Sentinels to promote the replica")
    promoted = time.time()
    group.restart(doomed)  # back as a replica of the new master, as a supervisor would
    _until(lambda: group.node(heir).info("replication")["connected_slaves"] == 1, 60, "the replica")
    ended: Counter[str] = Counter()
    lost = []
    deadline = time.monotonic() + JOB_SECONDS
    for h in handles:
        try:
            result = h.result(timeout=max(deadline - time.monotonic(), 1))
        except JobLostError as exc:
            ended["lost"] += 1
            lost.append(str(exc)[:160])
            continue
        ended["completed" if result.status == "completed" else "other"] += 1
    commits = first_commits(cluster, sorted(ids), died)
    switches = switch_times(group, died)
    print(
        f"# kill of {doomed}: replica {heir} link {link.get('master_link_status')}; "
        f"switch after {switches[0] - died if switches else float('nan'):.3f} s; "
        f"promotion seen after {promoted - died:.3f} s; {dict(ended)}",
        file=sys.stderr,
    )
    return {
        "first": min(commits.values()) - died if commits else float("nan"),
        "resume": [at - died for at in commits.values()],
        "switch": switches[0] - died if switches else float("nan"),
        "promoted": promoted - died,
        "ended": ended,
        "lost": lost,
    }


def run(replicas: int, kills: int, jobs: int, rounds: int) -> dict[str, float]:
    """One N's figures: a fresh Sentinel group and workers, ``kills`` failovers."""
    with _exclusive_db() as db:  # the side channel: a database no test or benchmark flushes meanwhile
        return _run(f"{REDIS_BASE}/{db}", replicas, kills, jobs, rounds)


def _run(calls_url: str, replicas: int, kills: int, jobs: int, rounds: int) -> dict[str, float]:
    calls = Redis.from_url(calls_url)
    calls.delete("bench:charges")
    group = OwnSentinelGroup().start()
    try:
        with ModelHosts(latency=0.0) as hosts:
            cluster = Cluster(
                hosts,
                dict.fromkeys(ROLES, 8),
                url=group.url(0),
                TANDEM_TOOLKIT="bench.tools:charge_toolkit",
                TANDEM_REDIS_WAIT_REPLICAS=str(replicas),
                BENCH_CALLS_REDIS_URL=calls_url,
                TANDEM_LEASE_SECONDS="2",
                TANDEM_STALL_SECONDS="3",
            )
            try:
                cluster.start(timeout=300)
                kills_seen = [one_kill(cluster, group, calls, jobs, rounds) for _ in range(kills)]
                assert cluster.group is not None
                exited = sum(p.poll() is not None for p in cluster.group.processes.values())
            finally:
                cluster.stop()
    finally:
        group.stop()
    charges = Counter(
        (c["job"], c["round"], c["index"]) for c in map(json.loads, calls.lrange("bench:charges", 0, -1))
    )
    calls.delete("bench:charges")
    # A kill whose jobs were all lost has no commit after it: left out of the times, counted.
    timed = [k for k in kills_seen if not math.isnan(k["first"]) and not math.isnan(k["switch"])]
    firsts = [k["first"] for k in timed]
    resumes = [r for k in kills_seen for r in k["resume"]]
    ended: Counter[str] = sum((k["ended"] for k in kills_seen), Counter())
    for k in kills_seen:
        for reason in k["lost"]:
            print(f"# wait{replicas}: lost: {reason}", file=sys.stderr)
    n = replicas
    return {
        f"wait{n}_kills": kills,
        f"wait{n}_first_commit_p50_s": round(percentile(firsts, 50), 3),
        f"wait{n}_first_commit_p99_s": round(percentile(firsts, 99), 3),
        f"wait{n}_job_resume_p50_s": round(percentile(resumes, 50), 3),
        f"wait{n}_job_resume_p99_s": round(percentile(resumes, 99), 3),
        f"wait{n}_kills_without_commit": kills - len(timed),
        f"wait{n}_switch_p50_s": round(percentile([k["switch"] for k in timed], 50), 3),
        f"wait{n}_commit_after_switch_p50_s": round(
            percentile([k["first"] - k["switch"] for k in timed], 50), 3
        ),
        f"wait{n}_commit_after_switch_min_s": round(
            min((k["first"] - k["switch"] for k in timed), default=float("nan")), 3
        ),
        f"wait{n}_jobs": kills * jobs,
        f"wait{n}_completed": ended["completed"],
        f"wait{n}_lost": ended["lost"],
        f"wait{n}_other": ended["other"],
        f"wait{n}_duplicates": sum(1 for count in charges.values() if count > 1),
        f"wait{n}_workers_exited": exited,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.add_argument("--kills", type=int, default=3, help="failovers per N (at most 10)")
    parser.add_argument("--jobs", type=int, default=12, help="jobs running at each kill (at most 100)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of one at_most_once call per job")
    parser.add_argument("--replicas", type=int, nargs="*", default=[0, 1], help="the N values to run")
    args = parser.parse_args(argv)
    if not (1 <= args.kills <= 10 and 1 <= args.jobs <= 100 and 1 <= args.rounds <= 20):
        parser.error("--kills 1..10, --jobs 1..100, --rounds 1..20")
    figures: dict[str, float] = {}
    for replicas in args.replicas:
        figures.update(run(replicas, args.kills, args.jobs, args.rounds))
    for name, value in figures.items():
        print(f"{name}: {value}")
    return 0 if all(figures[f"wait{n}_workers_exited"] == 0 for n in args.replicas) else 1


if __name__ == "__main__":
    sys.exit(main())
