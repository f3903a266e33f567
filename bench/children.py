"""Child jobs: a parent fanning out N children, and a parent cancelled with N children running.

``python -m bench.children [--children N] [--runs R] [--lease S]``

Starts its own Redis (a throw-away server on a free loopback port), the two model hosts
(``bench.models``, each reply after ``--latency`` seconds, 0.1 by default) and one worker per role
loading ``bench.children_tools``; every process is stopped by its pid.
Two scenarios, each run ``--runs`` times:

- **fan-out**: a dual parent whose first round calls ``fan_out``, which spawns N dual children of
  two rounds each (a ``noop`` call, then the deliverable) and waits for all; the parent's second
  round delivers. Printed: the time from sending the parent's intake to its park
  (``waiting_for_children``) and to its end, each measured twice: by the bench polling the job's
  record (its wall clock) and by the job's own event timestamps (``children_spawned``, ``final``).
  While the parent waits, the bench asks every worker for its active tasks (``celery inspect
  active``, from the first answer without the step that parked it, which returns just after the
  park) and checks the parent's record: the parent "held a worker" if any active task of a worker
  is a step of it while its record says parked, or its record leaves ``waiting_for_children``
  before the last child ended.
- **cancel**: a parent whose N children each park on a question nobody answers (running, holding
  no worker), then one whose N children are busy (51 rounds of model calls and ``noop``s); once all
  N are parked (under way), the parent is cancelled (``JobHandle.cancel``'s write). Printed:
  the time from the cancel until the last child's record is final, by the bench's polling and by
  the children's ``final`` event timestamps; p50 and max over the runs.

``--lease`` sets ``TANDEM_LEASE_SECONDS`` (and ``TANDEM_STALL_SECONDS`` to half of it): the
reconciler sweeps every eighth of the shorter, and a cancelled job that waits (parked) ends at its
next sweep, so the cancel figure scales with it (the default, 30 s, sweeps every 3.75 s).
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

from bench.common import Cluster, ModelHosts, percentile
from bench.models import call, plan_goal
from tandem.tasks.intake_message import send_intake
from tandem.tasks.spec import FINAL_STATES
from tandem.workers.embedded import EmbeddedRedis

TOOLKIT = "bench.children_tools:toolkit"


def _state(cluster: Cluster, job_id: str) -> str:
    raw = cluster.redis.hget(cluster.store.key(job_id, "state"), "state")
    return raw.decode() if raw else ""


def _until(check: Any, timeout: float, what: str, poll: float = 0.005) -> float:
    """Poll ``check`` until true; the wall-clock time it first was."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:g} s")
        time.sleep(poll)
    return time.time()


def _event_at(cluster: Cluster, job_id: str, kind: str) -> float:
    return min(e["at"] for e in cluster.events(job_id) if e["type"] == kind)


def _rounds(cluster: Cluster, job_id: str) -> int:
    """The job's round now (its record's ``round``, from 0)."""
    raw = cluster.redis.hget(cluster.store.key(job_id, "state"), "round")
    return int(float(raw)) if raw else 0


def _children(cluster: Cluster, parent: str) -> list[str]:
    return [c.decode() for c in cluster.redis.zrange(cluster.store.key(parent, "children"), 0, -1)]


def _submit(cluster: Cluster, n: int, kind: str) -> tuple[str, float]:
    job_id = str(uuid.uuid4())
    goal = plan_goal([[call("fan_out", n=n, kind=kind)]], "parent job")
    sent = time.time()
    send_intake(cluster.app, job_id, {"goal": goal, "reasoner": "dual", "max_rounds": 3})
    return job_id, sent


def _active_for(cluster: Cluster, job_id: str) -> int:
    """How many active tasks of any worker are steps of ``job_id`` (``celery inspect active``: a
    step's first argument is its job's id)."""
    replies = cluster.app.control.inspect(timeout=0.5).active() or {}
    return sum((t.get("args") or [None])[0] == job_id for tasks in replies.values() for t in tasks)


def fan_out(cluster: Cluster, n: int) -> dict[str, Any]:
    parent, sent = _submit(cluster, n, "two_rounds")
    parked = _until(lambda: _state(cluster, parent) == "waiting_for_children", 300, "the parent to park")
    children = _children(cluster, parent)
    held: list[int] = []
    stop = threading.Event()

    def sample() -> None:  # while it waits: no active task of it on any worker
        returned = False  # the step that parked it returns first
        while not stop.is_set():
            before = _state(cluster, parent)
            active = _active_for(cluster, parent)
            if before != "waiting_for_children" or _state(cluster, parent) != before:
                continue  # not parked all along this sample (it resumed)
            returned = returned or active == 0
            if returned:
                held.append(active)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    left_park = False  # its record leaves the park only once every child ended
    try:
        while not all(_state(cluster, c) in FINAL_STATES for c in children):
            if _state(cluster, parent) != "waiting_for_children":
                left_park = not all(_state(cluster, c) in FINAL_STATES for c in children)
                break
            time.sleep(0.005)
        done = _until(lambda: _state(cluster, parent) in FINAL_STATES, 300, "the parent to end")
    finally:
        stop.set()
        sampler.join()
    result = cluster.result(parent)
    statuses = [cluster.result(c).status for c in children]
    return {
        "park_s": parked - sent,
        "park_events_s": _event_at(cluster, parent, "children_spawned") - sent,
        "done_s": done - sent,
        "done_events_s": _event_at(cluster, parent, "final") - sent,
        "parent_status": result.status,
        "children_completed": statuses.count("completed"),
        "children": len(children),
        "held_worker": any(held) or left_park,
        "inspect_samples": len(held),
    }


def cancel(cluster: Cluster, n: int, kind: str) -> dict[str, Any]:
    parent, _sent = _submit(cluster, n, kind)
    _until(lambda: _state(cluster, parent) == "waiting_for_children", 300, "the parent to park")
    children = _children(cluster, parent)
    if kind == "question":
        _until(
            lambda: all(_state(cluster, c) == "awaiting_approval" for c in children), 300, "children to park"
        )
    else:  # every child under way: past its first round
        _until(lambda: all(_rounds(cluster, c) >= 1 for c in children), 300, "children to run")
    asked = time.time()
    cluster.store.request_cancel(parent)  # what JobHandle.cancel writes
    _until(lambda: _state(cluster, parent) in FINAL_STATES, 120, "the parent to end")
    parent_end = time.time()
    last = _until(lambda: all(_state(cluster, c) in FINAL_STATES for c in children), 120, "children to end")
    statuses = [cluster.result(c).status for c in children]
    return {
        "parent_end_s": parent_end - asked,
        "last_child_s": last - asked,
        "last_child_events_s": max(_event_at(cluster, c, "final") for c in children) - asked,
        "children_cancelled": statuses.count("cancelled"),
    }


def run(n: int, runs: int, lease: float | None, latency: float) -> dict[str, list[dict[str, Any]]]:
    env = {"TANDEM_CHILD_MAX_FANOUT": str(max(n, 100))}
    if lease is not None:
        env |= {"TANDEM_LEASE_SECONDS": str(lease), "TANDEM_STALL_SECONDS": str(lease / 2)}
    server = EmbeddedRedis().start()
    out: dict[str, list[dict[str, Any]]] = {"fan_out": [], "cancel_question": [], "cancel_busy": []}
    try:
        with ModelHosts(latency=0.0) as hosts:
            threads = {"thinker": 8, "actor": 8, "tools": 8}
            cluster = Cluster(hosts, threads, url=server.url, pool=None, **{"TANDEM_TOOLKIT": TOOLKIT, **env})
            try:
                cluster.start(timeout=120)
                cluster.run(plan_goal([[call("noop")]]), 3)  # warm-up: imports, connections
                hosts.latency = latency
                for _ in range(runs):
                    out["fan_out"].append(fan_out(cluster, n))
                    print("fan-out", out["fan_out"][-1], flush=True)
                for kind in ("question", "busy"):
                    for _ in range(runs):
                        out[f"cancel_{kind}"].append(cancel(cluster, n, kind))
                        print(f"cancel ({kind})", out[f"cancel_{kind}"][-1], flush=True)
            finally:
                cluster.stop()
    finally:
        server.stop()
    return out


def _row(name: str, values: list[float]) -> str:
    return f"{name:44} p50 {percentile(values, 50):7.2f}  max {max(values):7.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.children", description=__doc__.split("\n")[0])
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1, help="each model call's latency (s)")
    parser.add_argument("--lease", type=float, default=None, help="TANDEM_LEASE_SECONDS (default: tandem's)")
    args = parser.parse_args(argv)
    out = run(args.children, args.runs, args.lease, args.latency)
    fan = out["fan_out"]
    print(
        f"{args.children} children of 2 rounds (dual, model calls of {args.latency:g} s), one worker per "
        "role of 8 threads, "
        f"{args.runs} runs, lease {args.lease or 'default'}"
    )
    print(_row("fan-out: park after submit (s), record", [r["park_s"] for r in fan]))
    print(_row("fan-out: park after submit (s), events", [r["park_events_s"] for r in fan]))
    print(_row("fan-out: parent ended after submit (s), record", [r["done_s"] for r in fan]))
    print(_row("fan-out: parent ended after submit (s), events", [r["done_events_s"] for r in fan]))
    print(
        f"fan-out: parent held a worker while waiting: {any(r['held_worker'] for r in fan)} "
        f"({sum(r['inspect_samples'] for r in fan)} inspect samples); parents completed "
        f"{sum(r['parent_status'] == 'completed' for r in fan)}/{len(fan)}; children completed "
        f"{sum(r['children_completed'] for r in fan)}/{sum(r['children'] for r in fan)}"
    )
    for kind, what in (("question", "children parked on a question"), ("busy", "children busy (51 rounds)")):
        can = out[f"cancel_{kind}"]
        print(f"cancel, {what}:")
        print(_row("  parent ended after cancel (s)", [r["parent_end_s"] for r in can]))
        print(_row("  last child ended after cancel (s), record", [r["last_child_s"] for r in can]))
        print(_row("  last child ended after cancel (s), events", [r["last_child_events_s"] for r in can]))
        print(f"  children cancelled {sum(r['children_cancelled'] for r in can)}/{args.children * len(can)}")


if __name__ == "__main__":
    main()
