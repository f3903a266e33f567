"""``python -m bench.capacity [--quick]``: fleet-wide model-host capacity under load.

Three Actor workers at ``--concurrency 32`` each (96 threads) call one Actor host that takes
16 requests at once and answers 429 above that (``tests.openai_server``'s ``max_concurrency``),
with ``TANDEM_ACTOR_MAX_IN_FLIGHT=16``. A Thinker worker (32 threads, 0.05 s host) feeds them.
Each job is a dual job with no tool round: one Thinker call, one Actor call that delivers.

Figures (one ``name: value`` line each):

* ``capacity_max_in_flight_seen``: the most requests the Actor host saw at once (goal: <= 16);
* ``capacity_429s``, ``capacity_failed_jobs`` (goal: 0 each);
* ``capacity_throughput_ratio``: Actor calls per second achieved (jobs / (last end - first
  Actor call)) divided by 16 / latency (goal: >= 0.9);
* a 429 storm: the host answers every request 429 with ``Retry-After: 20`` for 30 s
  (``--quick``: 4 s for 6 s) while jobs arrive. ``capacity_storm_failed_jobs`` (goal: 0),
  ``capacity_storm_probes`` (calls let through alone after a window, counted by the limiter; the
  other 429s are the first wave, calls already sent when the storm began) against
  ``capacity_storm_windows``, the windows a storm of that length opens (goal: probes <= windows:
  one probe ends each window, the last one succeeds), and
  ``capacity_storm_done_s`` (from the jobs' submission, the storm starting with the first Actor
  request, to the last job's end).

``--pace`` measures the request budget instead: ``TANDEM_ACTOR_RPM=60`` (``--rpm``), the burst
of ``TANDEM_RATE_BURST_SECONDS`` (``--burst``, default the setting's default), one Actor worker of
32 threads, and 75 dual jobs (``--quick``: 65) submitted at once. Figures: ``pace_first_second``
(Actor requests in the first second after the first one), ``pace_most_in_any_1s`` and
``pace_most_in_any_60s`` (the most in any window ``[t, t + w)``; goals: the burst plus a second's
worth, and ``RPM``), ``pace_per_minute`` (the rate over the whole run), ``pace_waits_per_request``
(``waiting`` events: how often a step was sent back before its call went).

It runs on its own Redis database (10-15, taken by the integration tests' file lock), and stops
every process it started by pid.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from typing import Any

from redis import Redis

from bench import models
from tandem.broker_config import Settings
from tandem.tasks.app import create_app
from tandem.tasks.hosts.capacity import HostLimits, snapshot
from tandem.tasks.state.store import JobStore
from tandem.workers.embedded import WorkerGroup
from tests.integration.conftest import _exclusive_db
from tests.openai_server import OpenAIServer

CAPACITY = 16
WORKERS = 3
THREADS = 32


def _wait_all(store: JobStore, job_ids: list[str], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    results: dict[str, Any] = {}
    while len(results) < len(job_ids) and time.monotonic() < deadline:
        for job_id in job_ids:
            if job_id not in results:
                found = store.result(job_id)
                if found is not None:
                    results[job_id] = found
        time.sleep(0.05)
    return results


def _submit(app: Any, n: int, label: str) -> list[str]:
    spec = {"goal": models.plan_goal([], text=label), "reasoner": "dual", "max_rounds": 3}
    return [
        app.send_task("tandem.infer", kwargs={"spec": {**spec, "goal": f"{label} {i} {spec['goal']}"}}).id
        for i in range(n)
    ]


def run(quick: bool, baseline: bool = False) -> dict[str, float]:
    """Measure and print the figures; return them.

    ``baseline``: the same load on one Actor worker of 16 threads and no capacity limit (the host
    never sees more than 16 because there are only 16 threads), no storm. Its ratio is what the
    workers reach on this machine without any waiting: ``capacity_throughput_ratio`` divided by
    it isolates the cost of waiting for slots.
    """
    latency = 1.0
    jobs = 96 if quick else 320
    storm_for, retry_after = (6.0, 4.0) if quick else (30.0, 20.0)
    storm_jobs = 32 if quick else 64
    figures: dict[str, float] = {}
    with (
        _exclusive_db() as db,
        OpenAIServer(models.thinker, latency=0.05) as thinker,
        OpenAIServer(
            models.actor, latency=latency, max_concurrency=CAPACITY, overload_retry_after=1.0
        ) as actor,
    ):
        url = f"redis://127.0.0.1:6379/{db}"
        redis = Redis.from_url(url)
        redis.flushdb()
        env = {
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_PREFIX": "bench",
            "TANDEM_TOOLKIT": "bench.tools:toolkit",
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_THINKER_API_KEY": "bench-key",
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_ACTOR_API_KEY": "bench-key",
        }
        if not baseline:
            env["TANDEM_ACTOR_MAX_IN_FLIGHT"] = str(CAPACITY)
        settings = Settings.from_env(env)
        app = create_app(settings)
        store = JobStore(redis, settings.prefix)
        groups = [WorkerGroup(["thinker"], env=env, concurrency={"thinker": THREADS}, name="capt")]
        groups += [
            WorkerGroup(
                ["actor"], env=env, concurrency={"actor": CAPACITY if baseline else THREADS}, name=f"capa{n}"
            )
            for n in range(1 if baseline else WORKERS)
        ]
        try:
            for group in groups:
                group.start()
            for group in groups:
                group.wait_ready(app, timeout=120)

            # -- steady load above the host's capacity --------------------------------------------
            started = time.time()
            samples: list[tuple[int, int]] = []
            stop = threading.Event()
            limits = HostLimits(actor.url, CAPACITY)

            def sample() -> None:  # (calls at the host, steps registered as waiting for a slot)
                while not stop.wait(0.1):
                    samples.append((actor.in_flight, snapshot(redis, settings.prefix, limits).waiting))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            ids = _submit(app, jobs, "load")
            results = _wait_all(store, ids, timeout=60 + 4 * jobs * latency / CAPACITY)
            stop.set()
            sampler.join()
            first_call = min((r.received_at for r in actor.requests), default=time.monotonic())
            first_call_wall = time.time() - (time.monotonic() - first_call)
            elapsed_actor = _last_end(store, list(results), started) - first_call_wall
            figures["capacity_jobs"] = jobs
            figures["capacity_max_in_flight_seen"] = actor.in_flight_max
            figures["capacity_429s"] = actor.rejected
            figures["capacity_failed_jobs"] = jobs - sum(
                1 for r in results.values() if r.status == "completed"
            )
            bound = CAPACITY / latency
            figures["capacity_jobs_per_s"] = round(jobs / elapsed_actor, 2)
            figures["capacity_bound_jobs_per_s"] = bound
            figures["capacity_throughput_ratio"] = round(jobs / elapsed_actor / bound, 3)
            # Is a slot ever idle while steps wait for one (the wake-up's lag), or do steps not
            # reach the host fast enough (the workers' CPU)?
            busy = [s for s in samples if s[0] or s[1]]
            figures["capacity_idle_slot_with_waiters"] = round(
                sum(1 for n, w in busy if n < CAPACITY and w > 0) / max(1, len(busy)), 3
            )
            figures["capacity_mean_in_flight"] = round(sum(n for n, _ in busy) / max(1, len(busy)), 2)
            for name in list(figures):
                print(f"{name}: {figures[name]}", flush=True)

            if baseline:
                print(f"capacity_baseline_throughput_ratio: {figures['capacity_throughput_ratio']}")
                return figures

            # -- a 429 storm --------------------------------------------------------------------------
            actor.rejected_at.clear()
            rejected_before = actor.rejected
            actor.storm(storm_for, retry_after=retry_after, from_next_request=True)
            storm_wall = time.time()
            ids = _submit(app, storm_jobs, "storm")
            results = _wait_all(store, ids, timeout=storm_for + retry_after * 3 + 120)
            ended = _last_end(store, list(results), storm_wall)
            stats = snapshot(redis, settings.prefix, limits).stats
            probes = int(stats.get("probes", 0))
            storm = {
                "capacity_storm_jobs": storm_jobs,
                "capacity_storm_failed_jobs": storm_jobs
                - sum(1 for r in results.values() if r.status == "completed"),
                "capacity_storm_429s": actor.rejected - rejected_before,
                "capacity_storm_first_wave": actor.rejected - rejected_before - probes,
                "capacity_storm_probes": probes,
                "capacity_storm_windows": math.ceil(storm_for / retry_after),
                "capacity_storm_done_s": round(ended - storm_wall, 1),
            }
            for name, value in storm.items():
                print(f"{name}: {value}", flush=True)
            figures.update(storm)
        finally:
            for group in groups:
                group.stop()
            redis.flushdb()
    goals = {
        "capacity_max_in_flight_seen": figures.get("capacity_max_in_flight_seen", 99) <= CAPACITY,
        "capacity_429s": figures.get("capacity_429s", 1) == 0,
        "capacity_failed_jobs": figures.get("capacity_failed_jobs", 1) == 0,
        "capacity_throughput_ratio": figures.get("capacity_throughput_ratio", 0) >= 0.9,
        "capacity_storm_failed_jobs": figures.get("capacity_storm_failed_jobs", 1) == 0,
        "capacity_storm_probes": figures.get("capacity_storm_probes", 99)
        <= figures.get("capacity_storm_windows", 0),
    }
    for name, met in goals.items():
        print(f"{name}_goal_met: {str(met).lower()}", flush=True)
    return figures


def most_in_window(times: list[float], window: float) -> int:
    """The most of ``times`` (sorted) in any half-open window ``[t, t + window)``."""
    most, first = 0, 0
    for last, t in enumerate(times):
        while times[first] <= t - window:
            first += 1
        most = max(most, last - first + 1)
    return most


def run_pace(quick: bool, rpm: int = 60, burst: float | None = None) -> dict[str, float]:
    """What a host with ``TANDEM_ACTOR_RPM=rpm`` sees when many jobs arrive at once."""
    jobs = 65 if quick else 75
    figures: dict[str, float] = {}
    with (
        _exclusive_db() as db,
        OpenAIServer(models.thinker, latency=0.05) as thinker,
        OpenAIServer(models.actor, latency=0.05) as actor,
    ):
        url = f"redis://127.0.0.1:6379/{db}"
        redis = Redis.from_url(url)
        redis.flushdb()
        env = {
            "TANDEM_BROKER_URL": url,
            "TANDEM_RESULT_BACKEND": url,
            "TANDEM_REDIS_URL": url,
            "TANDEM_PREFIX": "bench",
            "TANDEM_TOOLKIT": "bench.tools:toolkit",
            "TANDEM_THINKER_MODEL": "openai/thinker-model",
            "TANDEM_THINKER_API_BASE": thinker.url,
            "TANDEM_THINKER_API_KEY": "bench-key",
            "TANDEM_ACTOR_MODEL": "openai/actor-model",
            "TANDEM_ACTOR_API_BASE": actor.url,
            "TANDEM_ACTOR_API_KEY": "bench-key",
            "TANDEM_ACTOR_RPM": str(rpm),
        }
        if burst is not None:
            env["TANDEM_RATE_BURST_SECONDS"] = str(burst)
        settings = Settings.from_env(env)
        app = create_app(settings)
        store = JobStore(redis, settings.prefix)
        groups = [
            WorkerGroup(["thinker"], env=env, concurrency={"thinker": 16}, name="pacet"),
            WorkerGroup(["actor"], env=env, concurrency={"actor": THREADS}, name="pacea"),
        ]
        try:
            for group in groups:
                group.start()
            for group in groups:
                group.wait_ready(app, timeout=120)
            ids = _submit(app, jobs, "pace")
            results = _wait_all(store, ids, timeout=90 + jobs * 60 / rpm)
            times = sorted(r.received_at for r in actor.requests)
            waits = sum(1 for i in ids for e in store.events(i, timeout=2) if e["type"] == "waiting")
            figures = {
                "pace_rpm": rpm,
                "pace_burst_seconds": settings.rate_burst_seconds,
                "pace_jobs": jobs,
                "pace_failed_jobs": jobs - sum(1 for r in results.values() if r.status == "completed"),
                "pace_requests": len(times),
                "pace_first_second": sum(1 for t in times if t < times[0] + 1.0),
                "pace_most_in_any_1s": most_in_window(times, 1.0),
                "pace_most_in_any_60s": most_in_window(times, 60.0),
                "pace_per_minute": round((len(times) - 1) / max(1e-9, times[-1] - times[0]) * 60, 1),
                "pace_waits_per_request": round(waits / max(1, len(times)), 2),
            }
            for name, value in figures.items():
                print(f"{name}: {value}", flush=True)
        finally:
            for group in groups:
                group.stop()
            redis.flushdb()
    size = max(1, math.floor(rpm * settings.rate_burst_seconds / 60))
    goals = {
        "pace_most_in_any_60s": figures.get("pace_most_in_any_60s", rpm + 1) <= rpm,
        "pace_most_in_any_1s": figures.get("pace_most_in_any_1s", rpm) <= size + math.ceil(rpm / 60),
        "pace_failed_jobs": figures.get("pace_failed_jobs", 1) == 0,
    }
    for name, met in goals.items():
        print(f"{name}_goal_met: {str(met).lower()}", flush=True)
    return figures


def _last_end(store: JobStore, job_ids: list[str], default: float) -> float:
    """When the last of ``job_ids`` ended (its final status's ``updated_at``)."""
    ends = [s.updated_at for s in (store.status(i) for i in job_ids) if s is not None]
    return max(ends, default=default)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.capacity", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs and a 6 s storm")
    parser.add_argument(
        "--baseline", action="store_true", help="one Actor worker of 16 threads, no limit, no storm"
    )
    parser.add_argument("--pace", action="store_true", help="the request budget: what a host sees")
    parser.add_argument("--rpm", type=int, default=60, help="--pace: TANDEM_ACTOR_RPM")
    parser.add_argument("--burst", type=float, default=None, help="--pace: TANDEM_RATE_BURST_SECONDS")
    args = parser.parse_args(argv)
    if args.pace:
        run_pace(args.quick, args.rpm, args.burst)
    else:
        run(args.quick, args.baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
