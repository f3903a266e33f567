"""``python -m bench.submit [--submits 3000]``: what one submit costs the client and Redis, and
that it leaves no key without a TTL.

A throwaway Redis on loopback (the embedded one, ``tandem.workers.embedded.EmbeddedRedis``: Redis
6.2, no persistence, a free port), a ``JobStore`` on it; 200 submits warm up (the scripts loaded),
then ``--submits`` submits (``JobStore.mark_queued`` with an intake spec: the job's record, its
intake and the recent-jobs index, what ``submit`` writes before the intake message). Figures, per
submit (``name: value`` lines):

* ``submit_wall_us`` and ``submit_client_cpu_us`` (this process's CPU time);
* ``submit_commands`` and ``submit_redis_command_us``: the commands Redis ran and their time
  (``INFO commandstats``);
* ``submit_redis_cpu_us``: a second, independent measure of Redis's cost, its CPU time
  (``INFO cpu``, ``used_cpu_user + used_cpu_sys``), which also counts reading and answering;
* ``submit_keys_without_ttl``: keys of the store left without a TTL (0 is the promise).

To compare two trees in one sitting, run this file from each: ``PYTHONPATH=<tree> python
bench/submit.py``.
"""

from __future__ import annotations

import argparse
import time
import uuid

from redis import Redis

from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import EmbeddedRedis

WARM_UP = 200
INTAKE = '{"goal": "a goal"}'


def _redis_cpu(redis: Redis) -> float:
    cpu = redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def measure(submits: int) -> dict[str, float]:
    """The figures of ``submits`` submits against a fresh embedded Redis."""
    server = EmbeddedRedis().start()
    try:
        redis = Redis.from_url(server.url)
        store = JobStore(redis, prefix="bench", ttl=600)
        for _ in range(WARM_UP):
            store.mark_queued(uuid.uuid4().hex, "dual", intake=INTAKE)
        redis.config_resetstat()
        redis_cpu = _redis_cpu(redis)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(submits):
            store.mark_queued(uuid.uuid4().hex, "dual", intake=INTAKE)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        redis_cpu = _redis_cpu(redis) - redis_cpu
        stats = {k: v for k, v in redis.info("commandstats").items() if k != "cmdstat_info"}
        untimed = sum(1 for key in redis.scan_iter("bench:*", count=1000) if redis.ttl(key) == -1)
        redis.close()
    finally:
        server.stop()
    return {
        "submit_wall_us": wall / submits * 1e6,
        "submit_client_cpu_us": cpu / submits * 1e6,
        "submit_commands": sum(v["calls"] for v in stats.values()) / submits,
        "submit_redis_command_us": sum(v["usec"] for v in stats.values()) / submits,
        "submit_redis_cpu_us": redis_cpu / submits * 1e6,
        "submit_keys_without_ttl": float(untimed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.submit", description=__doc__.split("\n")[0])
    parser.add_argument("--submits", type=int, default=3000)
    args = parser.parse_args()
    for name, value in measure(args.submits).items():
        print(f"{name}: {value:.2f}")


if __name__ == "__main__":
    main()
