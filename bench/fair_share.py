"""Fair share between tenants: a later tenant's first model call behind another tenant's burst.

``python -m bench.fair_share [--a-jobs N] [--b-jobs M] [--b-after S] [--latency L] [--lanes K]
[--runs idle,off,on]``

Tenant A submits ``--a-jobs`` dual jobs (one round: a Thinker call and an Actor call that
delivers), tenant B ``--b-jobs`` more ``--b-after`` seconds later, equal weights, one worker per
role (Thinker and Actor ``--threads`` threads each), model hosts answering after ``--latency``
seconds. Run twice: fair share **off** (no tenant settings: jobs start in arrival order) and
**on** (``TANDEM_TENANTS`` with equal weights, ``TANDEM_MAX_RUNNING_JOBS`` = the Thinker's plus the
Actor's threads by default, ``--slots``: a dual job uses one role at a time; with ``--lanes K``
also ``TANDEM_INTAKE_LANES=K`` on the workers and the submitting client). Printed side by side:

- B's wait for its first model call: from sending its intake message to the first
  ``model_reply`` event, less one model call's latency (p50, p99); and, as the reference, the same
  for B's jobs alone on an idle fleet;
- of that wait, B's wait for its intake (from sending to its record's creation, read from the
  records: admission happens there; the intake queue is FIFO unless ``--lanes``);
- the same first-call wait measured a second way, without events: from sending to the Thinker
  host's receipt of the job's first request (by the host's clock; it includes no model latency,
  so it should come out close to the first line);
- A's throughput: A's jobs per second from its first submission to its last end.

Each run starts fresh workers and runs one warm-up job before it measures.

The issue's figure is 2,000 A jobs and 20 B jobs ten seconds later; the defaults are smaller so
that a run fits a shared machine (the command prints what it ran).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

from bench.common import Cluster, ModelHosts, flush_db, percentile
from bench.models import plan_goal
from tandem.tasks.intake_message import send_intake

_SENT_MONOTONIC: dict[str, float] = {}
"""When each job was sent, on the clock the model hosts stamp their requests with."""


def _send(cluster: Cluster, owner: str) -> tuple[str, float]:
    job_id = str(uuid.uuid4())
    sent = time.time()
    _SENT_MONOTONIC[job_id] = time.monotonic()
    goal = plan_goal([], text=f"benchmark job {job_id}")  # the host's requests name their job
    send_intake(cluster.app, job_id, {"goal": goal, "reasoner": "dual", "max_rounds": 3, "owner": owner})
    return job_id, sent


def _host_waits(hosts: ModelHosts, job_ids: list[str]) -> list[float]:
    """The second measure: each job's wait from sending to its first request reaching the Thinker's
    host (the host's own clock, no event read)."""
    first: dict[str, float] = {}
    wanted = set(job_ids)
    for request in hosts.thinker.requests:
        text = " ".join(str(m.get("content") or "") for m in request["messages"])
        for job_id in wanted - first.keys():
            if f"benchmark job {job_id}" in text:
                first[job_id] = request.received_at - _SENT_MONOTONIC[job_id]
                break
    return [first[j] for j in job_ids if j in first]


def _first_call_waits(
    cluster: Cluster, sent: dict[str, float], latency: float
) -> tuple[list[float], list[float]]:
    """Each job's wait for its first model reply (less one call's latency), and for its intake."""
    waits, intakes = [], []
    for job_id, at in sent.items():
        replies = [e["at"] for e in cluster.events(job_id) if e["type"] == "model_reply"]
        waits.append(min(replies) - at - latency)
        intakes.append(float(cluster.redis.hget(cluster.store.key(job_id, "state"), "created_at") or 0) - at)
    return waits, intakes


def run(
    a_jobs: int, b_jobs: int, b_after: float, latency: float, threads: int, slots: int | None, lanes: int = 0
) -> dict[str, float]:
    """One run (see the module docstring); ``a_jobs`` 0 is the idle fleet's reference; ``lanes``:
    ``TANDEM_INTAKE_LANES`` of the workers and of the submitting client (0: none)."""
    flush_db()
    env: dict[str, str] = {"TANDEM_INTAKE_LANES": str(lanes)} if lanes else {}
    if slots is not None:  # fair share on
        env.update(
            {
                "TANDEM_TENANTS": json.dumps({"default": {"weight": 1}}),
                "TANDEM_MAX_RUNNING_JOBS": str(slots),
            }
        )
    with ModelHosts(latency=latency) as hosts:
        cluster = Cluster(hosts, {"thinker": threads, "actor": threads, "tools": 2}, **env)
        try:
            cluster.start()
            warm, _at = _send(cluster, "warm-up")  # the first job of a fresh worker pays its imports
            cluster.wait([warm], timeout=300)
            started = time.time()
            a_sent = dict(_send(cluster, "tenant-a") for _ in range(a_jobs))
            time.sleep(max(0.0, started + b_after - time.time()) if a_jobs else 0.0)
            b_sent = dict(_send(cluster, "tenant-b") for _ in range(b_jobs))
            ended = cluster.wait([*a_sent, *b_sent], timeout=3600, poll=0.2)
            failed = [j for j, s in ended.items() if s.state != "completed"]
            if failed:
                raise RuntimeError(f"{len(failed)} jobs did not complete, e.g. {cluster.result(failed[0])}")
            b_waits, b_intakes = _first_call_waits(cluster, b_sent, latency)
            out = {
                "b_first_call_wait_p50_s": percentile(b_waits, 50),
                "b_first_call_wait_p99_s": percentile(b_waits, 99),
            }
            out["b_intake_wait_p99_s"] = percentile(b_intakes, 99)
            b_host = _host_waits(hosts, list(b_sent))
            out["b_host_wait_p99_s"] = percentile(b_host, 99) if len(b_host) == len(b_sent) else float("nan")
            if a_jobs:
                makespan = max(ended[j].updated_at for j in a_sent) - min(a_sent.values())
                out["a_jobs_per_s"] = a_jobs / makespan
            return out
        finally:
            cluster.stop()
            flush_db()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fair_share", description=__doc__.split("\n")[0])
    parser.add_argument("--a-jobs", type=int, default=300)
    parser.add_argument("--b-jobs", type=int, default=20)
    parser.add_argument("--b-after", type=float, default=5.0)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--slots", type=int, default=0, help="TANDEM_MAX_RUNNING_JOBS (default: 2 x threads)")
    parser.add_argument(
        "--lanes", type=int, default=0, help="TANDEM_INTAKE_LANES of the fair-share-on run (default: none)"
    )
    parser.add_argument(
        "--runs", default="idle,off,on", help="which runs, comma-separated (default: idle,off,on)"
    )
    args = parser.parse_args(argv)
    slots = args.slots or 2 * args.threads
    runs = {r.strip() for r in args.runs.split(",")}
    skipped = dict.fromkeys(
        ("b_first_call_wait_p50_s", "b_first_call_wait_p99_s", "b_intake_wait_p99_s", "b_host_wait_p99_s"),
        "-",
    )
    skipped["a_jobs_per_s"] = "-"
    idle: dict[str, Any] = dict(skipped)
    off: dict[str, Any] = dict(skipped)
    on: dict[str, Any] = dict(skipped)
    if "idle" in runs:
        idle = dict(run(0, args.b_jobs, 0.0, args.latency, args.threads, slots=None))
    if "off" in runs:
        off = dict(run(args.a_jobs, args.b_jobs, args.b_after, args.latency, args.threads, slots=None))
    if "on" in runs:
        on = dict(run(args.a_jobs, args.b_jobs, args.b_after, args.latency, args.threads, slots, args.lanes))
    print(
        f"tenant A {args.a_jobs} dual jobs, tenant B {args.b_jobs} jobs {args.b_after:g} s later, "
        "equal weights; "
        f"one worker per role ({args.threads} Thinker and {args.threads} Actor threads), model latency "
        f"{args.latency:g} s; fair share on: TANDEM_MAX_RUNNING_JOBS={slots}"
        + (f", TANDEM_INTAKE_LANES={args.lanes}" if args.lanes else "")
    )
    rows: list[tuple[str, Any, Any, Any]] = [
        ("B: first model call wait p50 (s)", idle["b_first_call_wait_p50_s"], off["b_first_call_wait_p50_s"],
         on["b_first_call_wait_p50_s"]),
        ("B: first model call wait p99 (s)", idle["b_first_call_wait_p99_s"], off["b_first_call_wait_p99_s"],
         on["b_first_call_wait_p99_s"]),
        ("B: of which intake wait p99 (s)", idle["b_intake_wait_p99_s"], off["b_intake_wait_p99_s"],
         on["b_intake_wait_p99_s"]),
        ("B: first call at the host p99 (s)", idle["b_host_wait_p99_s"], off["b_host_wait_p99_s"],
         on["b_host_wait_p99_s"]),
        ("A: jobs per second", "-", off["a_jobs_per_s"], on["a_jobs_per_s"]),
    ]  # fmt: skip
    print(f"{'':36} {'idle fleet':>12} {'fair off':>12} {'fair on':>12}")
    for name, *values in rows:
        print(f"{name:36} " + " ".join(f"{v:>12.3f}" if isinstance(v, float) else f"{v:>12}" for v in values))
    if isinstance(on["b_first_call_wait_p99_s"], float):
        print(
            f"B's p99 wait with fair share on: {on['b_first_call_wait_p99_s'] / args.latency:.2f} model calls"
        )
    if isinstance(on["a_jobs_per_s"], float) and isinstance(off["a_jobs_per_s"], float):
        print(f"A's throughput lost: {100 * (1 - on['a_jobs_per_s'] / off['a_jobs_per_s']):.1f} %")


if __name__ == "__main__":
    main()
