"""``python -m bench.step_trace [--step actor] [--round 0] [--all]``: the modules one step of a job walks.

One dual job runs in this process: a ``Runtime`` on fakeredis with the offline demo model, the
broker replaced by a queue whose messages are applied one after the other (as Celery's eager mode
would, but in the order they were sent). The message of the chosen step (``--step``, ``--round``)
runs under ``sys.setprofile``: every call into a ``tandem`` module whose arguments carry the job
(its id, or an object whose ``job_id`` is it: a claim, a view) is a point on the job's path
(live tokens are coalesced by size only, not by time, so that the path is the same on a busy machine)
(``--all``: every call into a ``tandem`` module). Consecutive calls in one module are one visit.

Printed (``name: value`` lines):

* ``step_trace_modules``: the distinct modules the path visits;
* ``step_trace_returns``: how often the path enters a module it visited before and has left since
  (a module earlier in the sequence that is not the current one): the hops back and forth that a
  reader following the job has to make;
* the sequence itself, one ``# module`` comment line per visit.

Issue 23 counted 16 modules and 17 returns for one dual step before the ``tasks/`` restructuring
(by another tool); this script is the measure kept with the code (see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import deque
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import fakeredis

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.runtime import Runtime

JOB = "trace-job-1"
STEP_TASKS = {
    "thinker": "tandem.thinker_turn",
    "actor": "tandem.actor_turn",
    "tools": "tandem.run_tool",
    "collect": "tandem.collect_tools",
}


def _carries(value: Any, job_id: str) -> bool:
    return value == job_id or getattr(value, "job_id", None) == job_id


def path_of(run: Callable[[], Any], job_id: str, *, every_call: bool = False) -> list[str]:
    """The ``tandem`` modules ``run()`` enters on the job's path, one entry per visit."""
    visits: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("tandem.") or (visits and visits[-1] == module):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if every_call or any(_carries(frame.f_locals.get(n), job_id) for n in names):
            visits.append(module)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return visits


def returns(visits: list[str]) -> int:
    """How many visits enter a module seen earlier in ``visits`` (and left since)."""
    seen: set[str] = set()
    back = 0
    for module in visits:
        if module in seen:
            back += 1
        seen.add(module)
    return back


def trace_step(step: str, round_no: int, *, every_call: bool = False) -> list[str]:
    """Run one dual job up to message ``step`` of ``round_no``; trace that message; finish the job."""
    for module in app.conf.imports:  # the task modules, as a worker imports them
        importlib.import_module(module)
    # Live tokens are coalesced by time too (every ``delta_interval_ms``): an interval longer than the
    # run makes the path the same on a busy machine and a quiet one.
    settings = Settings(lease_seconds=30.0, stall_seconds=60.0, memory_ttl=600, delta_interval_ms=600_000)
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    previous_runtime, runtime_module._runtime = runtime_module._runtime, runtime
    queue: deque[tuple[str, list[Any]]] = deque()
    original_send = app.send_task

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        queue.append((name, list(args or [])))

    app.send_task = send_task
    traced: list[str] | None = None
    try:
        app.tasks["tandem.infer"].apply(
            kwargs={"spec": {"goal": "What is 17 * 23?", "reasoner": "dual"}}, task_id=JOB, ignore_result=True
        )
        wanted = (STEP_TASKS[step], round_no)
        while queue:
            name, args = queue.popleft()
            message = app.tasks[name]
            if traced is None and (name, args[1]) == wanted:
                traced = path_of(partial(message.apply, args=args), JOB, every_call=every_call)
            else:
                message.apply(args=args)
    finally:
        app.send_task = original_send
        runtime_module._runtime = previous_runtime
    if traced is None:
        raise SystemExit(
            f"the job never ran step {step!r} of round {round_no}: choose another --step/--round"
        )
    return traced


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--step", choices=sorted(STEP_TASKS), default="actor")
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--all", action="store_true", help="every call into tandem, not only the job's")
    args = parser.parse_args(argv)
    visits = trace_step(args.step, args.round, every_call=args.all)
    print(f"step_trace_modules: {len(set(visits))}")
    print(f"step_trace_returns: {returns(visits)}")
    for module in visits:
        print(f"# {module}")


if __name__ == "__main__":
    main()
