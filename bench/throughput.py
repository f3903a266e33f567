"""Parallelism figures: many jobs at once on one worker per role, and one Actor turn's fan-out.

* ``throughput_ratio``: ``jobs`` concurrent dual jobs (200; 40 with ``--quick``), each with three
  rounds of one 0.2 s tool call and then the round that delivers, with 0.5 s model latency.
  Jobs per second achieved (jobs / (last end - first submission)) divided by the bound that worker
  concurrency and latency set (``bound_jobs_per_s``). With fewer jobs, filling and draining the
  pipeline weighs more, so the quick ratio is lower than the full one.
* ``fanout_speedup``: one Actor turn calling ``sleep_tool(1)`` 8 times, instant model: the
  sequential time (8 s) divided by the time from the Actor's reply to the start of the next
  round (the chord of 8 ``run_tool`` tasks, ``collect_tools`` and the hop to the next Thinker turn).
"""

from __future__ import annotations

from collections.abc import Mapping

from bench.common import Cluster, ModelHosts, median, percentile
from bench.models import call, plan_goal

MODEL_LATENCY = 0.5
TOOL_SECONDS = 0.2
TOOL_ROUNDS = 3
FANOUT_CALLS = 8
FANOUT_SECONDS = 1.0

BOUND_FORMULA = (
    "bound_jobs_per_s = min(Ct / (4 * 0.5 s), Ca / (4 * 0.5 s), Cl / (3 * 0.2 s)): a job of 3 tool "
    "rounds and the round that delivers makes 4 Thinker calls, 4 Actor calls (3 with a tool call, "
    "the last with the deliverable) and 3 tool calls; Ct, Ca, Cl are the thread counts of the "
    "thinker, actor and tools workers; the busiest role bounds the rate"
)


def bound_jobs_per_s(concurrency: Mapping[str, int]) -> float:
    """The most jobs per second the workers' concurrency allows (see ``BOUND_FORMULA``)."""
    thinker_calls = actor_calls = TOOL_ROUNDS + 1
    return min(
        concurrency["thinker"] / (thinker_calls * MODEL_LATENCY),
        concurrency["actor"] / (actor_calls * MODEL_LATENCY),
        concurrency["tools"] / (TOOL_ROUNDS * TOOL_SECONDS),
    )


def throughput(
    cluster: Cluster, hosts: ModelHosts, concurrency: Mapping[str, int], quick: bool
) -> dict[str, float]:
    """Run the concurrent jobs; the ratio to the bound and the job-time percentiles."""
    jobs = 40 if quick else 200
    hosts.latency = MODEL_LATENCY
    goal = plan_goal([[call("sleep_tool", seconds=TOOL_SECONDS)] for _ in range(TOOL_ROUNDS)])
    sent = dict(cluster.submit(goal, TOOL_ROUNDS + 2) for _ in range(jobs))
    ended = cluster.wait(list(sent), timeout=600, poll=0.05)
    hosts.latency = 0.0
    failed = [j for j, s in ended.items() if s.state != "completed"]
    if failed:
        raise RuntimeError(
            f"{len(failed)} throughput jobs did not complete, e.g. {cluster.result(failed[0])}"
        )
    durations = [ended[j].updated_at - t for j, t in sent.items()]
    makespan = max(s.updated_at for s in ended.values()) - min(sent.values())
    achieved = jobs / makespan
    bound = bound_jobs_per_s(concurrency)
    return {
        "throughput_jobs": float(jobs),
        "throughput_jobs_per_s": achieved,
        "throughput_bound_jobs_per_s": bound,
        "throughput_ratio": achieved / bound,
        "throughput_job_p50_s": percentile(durations, 50),
        "throughput_job_p99_s": percentile(durations, 99),
    }


def fanout(cluster: Cluster, hosts: ModelHosts, quick: bool) -> dict[str, float]:
    """One Actor turn calling 8 one-second tools: the speed-up over running them one by one."""
    hosts.latency = 0.0
    goal = plan_goal([[call("sleep_tool", seconds=FANOUT_SECONDS) for _ in range(FANOUT_CALLS)]])
    spans: list[float] = []
    jobs: list[float] = []
    for _ in range(1 if quick else 3):
        job_seconds, result = cluster.run(goal, 3)
        events = cluster.events(result.job_id)
        replied = next(e["at"] for e in events if e["type"] == "model_reply" and e["data"]["role"] == "actor")
        next_round = next(e["at"] for e in events if e["type"] == "round_started" and e["data"]["round"] == 1)
        spans.append(next_round - replied)
        jobs.append(job_seconds)
    sequential = FANOUT_CALLS * FANOUT_SECONDS
    return {
        "fanout_speedup": sequential / median(spans),
        "fanout_turn_s": median(spans),
        "fanout_job_s": median(jobs),
    }
