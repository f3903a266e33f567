"""Approval figures: what parked jobs hold, and how fast a decision lets them go on.

``python -m bench.approval [--jobs N]`` (database ``BENCH_REDIS_DB``, flushed before and after)
starts one worker per role with an instant model host, submits ``N`` dual jobs whose Actor calls
``noop`` (``approve_tools=["noop"]``: every call waits), and prints one ``name: value`` line per figure:

* ``parked_jobs``: jobs in ``awaiting_approval`` once all have parked;
* ``parked_queued_messages`` / ``parked_active_tasks``: messages in the broker's queues and tasks
  running in the workers while they wait (0 and 0: a parked job holds nothing);
* ``decide_round_trip_ms``: median time of one ``tandem.decide`` sent by name and answered;
* ``decision_to_end_ms``: median time from a decision's answer to its job's end (the approved
  call, the collect step, one more Thinker and Actor turn).
"""

from __future__ import annotations

import argparse
import time

from celery import Celery

from bench.common import Cluster, ModelHosts, flush_db, median
from bench.models import call, plan_goal


def run(jobs: int) -> dict[str, float]:
    """Measure the figures with ``jobs`` parked jobs."""
    flush_db()
    figures: dict[str, float] = {}
    with ModelHosts() as hosts:
        cluster = Cluster(hosts, {"thinker": 4, "actor": 4, "tools": 4}, TANDEM_STALL_SECONDS="2")
        try:
            cluster.start()
            spec = {"goal": plan_goal([[call("noop")]]), "max_rounds": 4, "approve_tools": ["noop"]}
            ids = [cluster.app.send_task("tandem.infer", kwargs={"spec": spec}).id for _ in range(jobs)]
            deadline = time.monotonic() + 120
            while True:
                states = [cluster.store.status(j) for j in ids]
                parked = sum(1 for s in states if s is not None and s.state == "awaiting_approval")
                if parked == jobs or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            figures["parked_jobs"] = parked
            time.sleep(3.0)  # past the stall time: the reconciler has looked at every parked job
            lists = [k for k in cluster.redis.scan_iter() if cluster.redis.type(k) == b"list"]
            queued = sum(cluster.redis.llen(k) for k in lists if not k.startswith((b"bench", b"_kombu")))
            figures["parked_queued_messages"] = queued + cluster.redis.hlen("unacked")
            active = cluster.app.control.inspect(timeout=2).active() or {}
            figures["parked_active_tasks"] = sum(len(v) for v in active.values())
            bare = Celery(broker=cluster.url, backend=cluster.url)
            round_trips, to_end = [], []
            try:
                for job_id in ids:
                    sent = time.monotonic()
                    decision = [{"index": 1, "approve": True}]
                    reply = bare.send_task("tandem.decide", kwargs={"job_id": job_id, "decisions": decision})
                    assert reply.get(timeout=30)["accepted"]
                    answered = time.monotonic()
                    round_trips.append(answered - sent)
                    cluster.wait([job_id], timeout=60, poll=0.002)
                    to_end.append(time.monotonic() - answered)
            finally:
                bare.close()
            figures["decide_round_trip_ms"] = round(median(round_trips) * 1000, 1)
            figures["decision_to_end_ms"] = round(median(to_end) * 1000, 1)
        finally:
            if cluster.group is not None:
                cluster.group.stop()
            cluster.app.close()
            flush_db()
    return figures


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.approval")
    parser.add_argument("--jobs", type=int, default=20)
    for name, value in run(parser.parse_args().jobs).items():
        print(f"{name}: {value:g}")


if __name__ == "__main__":
    main()
