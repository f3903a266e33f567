"""The Celery tasks of a job: thin adapters over ``tandem.reasoner.steps``, one step per task.

``tandem.infer`` (intake) → ``thinker_turn`` (queue thinker) → ``actor_turn`` (queue actor) →
``chord(run_tool × N)`` (queue tools) → ``collect_tools`` → next round … → ``finalize``.
Each task replaces itself with the next (``Task.replace``), so every step runs under the job id
and the job id's result is the final ``JobResult``.

Jobs may be delivered more than once (late acks, redelivery, lease takeover). Every step is
keyed by (job, round, role): it first looks for its stored result, holds a lease while it works
(``tandem.tasks.leases``), and records that it moved on; a duplicate finds one of these and is ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Task as CeleryTask
from celery import chord
from celery.canvas import Signature
from celery.exceptions import Ignore

from tandem.reasoner import react, steps
from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.reasoner.task import Task
from tandem.tasks.app import app
from tandem.tasks.budgets import budget_spent, message_priority
from tandem.tasks.errors import JobError
from tandem.tasks.events import EventHooks
from tandem.tasks.host_model import CapacityWait
from tandem.tasks.leases import StepLease
from tandem.tasks.runtime import get_runtime
from tandem.tasks.spec import JobResult, JobSpec, validate_spec
from tandem.tasks.waiting import wait_for_capacity
from tandem.toolkit.errors import ToolkitError
from tandem.toolkit.redaction import redact

log = logging.getLogger("tandem.tasks")


def _dispatch(task: CeleryTask, args: tuple[Any, ...]) -> dict[str, Any]:
    """How to send this very message again (used by a lease takeover)."""
    req = task.request
    options = {
        "task_id": req.id,
        "group_id": req.group,
        "group_index": req.group_index,
        "chord": req.chord,
        "root_id": req.root_id,
        "parent_id": req.parent_id,
        "replaced_task_nesting": req.get("replaced_task_nesting", 0),
        "priority": (req.delivery_info or {}).get("priority"),
    }
    return {
        "name": task.name,
        "args": list(args),
        "options": {k: v for k, v in options.items() if v is not None},
    }


@contextmanager
def _step(task: CeleryTask, job_id: str, step_id: str, args: tuple[Any, ...]) -> Iterator[StepLease]:
    """Run a step at most once at a time: ignore it if the job ended, the step already moved on,
    or another live worker holds its lease."""
    rt = get_runtime()
    if rt.store.result(job_id) is not None or rt.store.done(job_id, step_id) is not None:
        raise Ignore()
    lease = StepLease(
        rt.redis, rt.lease_keys, f"{job_id}:{step_id}", rt.settings.lease_seconds, _dispatch(task, args)
    )
    if not lease.acquire():
        raise Ignore()
    with lease:
        yield lease


def _advance(task: CeleryTask, job_id: str, step_id: str, transition: str, sig: Signature) -> Any:
    """Hand the job to ``sig`` under the same task id, then record that ``step_id`` moved on.

    Sending comes first: if the worker dies in between, the step is run again and sends again,
    and the duplicate next step is ignored by its own guard.
    """
    try:
        return task.replace(sig)
    finally:
        get_runtime().store.mark_done(job_id, step_id, transition)


def _load(job_id: str) -> tuple[JobSpec, Task]:
    rt = get_runtime()
    spec = rt.store.spec(job_id)
    if spec is None:
        raise Ignore()  # unknown or expired job: nothing to do
    return spec, rt.task_for(job_id, spec)


def finish(job_id: str, status: str, error: str | None = None) -> dict[str, Any]:
    """Store the job's final result (the first stored wins) and return it as a JSON dict."""
    rt = get_runtime()
    memory = rt.store.memory(job_id)
    messages = memory.get_messages()
    deliverable = steps.conclude(memory) if status == "completed" else ""
    budget_error = "the round budget (max_rounds) ran out before the Actor wrote a <deliverable>"
    spec = rt.store.spec(job_id)
    if spec is not None and spec.reasoner == "react":
        # ReAct: the answer is the last reply or a return_direct output; truncated says "needs more steps".
        deliverable = react.react_answer(memory) if status in ("completed", "truncated") else ""
        budget_error = react.budget_error(spec.max_rounds)
    result = JobResult(
        job_id=job_id,
        status=status,  # type: ignore[arg-type]
        deliverable=deliverable,
        rounds=max((m.round for m in messages), default=-1) + 1,
        error=error if error or status != "truncated" else budget_error,
        usage=steps.total_usage(messages),
    )
    return rt.store.finish(result, rt.settings.memory_ttl).model_dump(mode="json")


def _failure(exc: BaseException) -> str:
    if not isinstance(exc, ReasonerError | JobError | ToolkitError):
        log.exception("step failed unexpectedly")
    return redact(f"{type(exc).__name__}: {exc}")


def _fan_out(job_id: str, round_no: int, count: int) -> Signature:
    """The chord that runs the reply's tool calls: at most ``TANDEM_MAX_TOOL_CALLS`` ``run_tool``
    tasks; the calls past the cap get their FAILED result (naming the cap) stored here, unrun."""
    rt = get_runtime()
    cap = min(count, rt.runner.max_calls)
    if count > cap:
        reply = rt.store.memory(job_id).get_message(round_no, "actor")
        calls = steps.calls_of(reply) if reply is not None else []
        native = reply.tool_calls if reply is not None else []
        for i in range(cap + 1, count + 1):
            call_id = native[i - 1].id if native else None  # a native call needs its answer by id
            result = rt.runner.run_call({}, calls[i - 1], i, call_id=call_id)  # over the cap: never run
            rt.store.save_tool_result(job_id, round_no, result)
    header = [run_tool.si(job_id, round_no, i) for i in range(1, cap + 1)]
    return chord(header, collect_tools.si(job_id, round_no, count))


def first_step(spec: JobSpec, job_id: str, round_no: int) -> Signature:
    """The task that opens ``round_no``: the Thinker's for dual jobs, the Actor's otherwise."""
    if spec.reasoner == "dual":
        return thinker_turn.si(job_id, round_no)
    if spec.reasoner == "react":
        return react_turn.si(job_id, round_no)
    return actor_turn.si(job_id, round_no)


@app.task(name="tandem.infer", bind=True)
def infer(self: CeleryTask, spec: dict[str, Any]) -> Any:
    """Start a job from its spec; the id of this task is the job id, its result the JobResult."""
    job_id = self.request.id
    rt = get_runtime()
    try:  # a refused spec stores nothing: the answer is this task's result only
        job_spec = rt.check_spec(validate_spec(spec, rt.settings.limits))
        rt.task_for(job_id, job_spec).recommend()  # whatever else is wrong fails here, not later
    except Exception as exc:
        error = redact(str(exc)) if isinstance(exc, JobError | ToolkitError) else _failure(exc)
        refused = JobResult(job_id=job_id, status="failed", error=error).model_dump(mode="json")
        # Answer first, then undo the ``queued`` marker ``submit`` wrote for followers: the job is
        # never unknown in between.
        self.backend.store_result(job_id, refused, "SUCCESS")
        rt.store.discard_queued(job_id)
        return refused
    rt.store.create(job_id, job_spec)
    with _step(self, job_id, "start", (job_spec.model_dump(mode="json"),)):  # secrets sealed
        rt.store.set_status(job_id, state="running", reasoner=job_spec.reasoner, step="start")
        rt.store.publish(job_id, "job_started", {"spec": job_spec.public_dump()})
        first = first_step(job_spec, job_id, 0)
        first.set(priority=message_priority(job_spec.priority, rt.settings.broker_url))
        return _advance(self, job_id, "start", "round 0", first)


@app.task(name="tandem.thinker_turn", bind=True)
def thinker_turn(self: CeleryTask, job_id: str, round_no: int) -> Any:
    """The Thinker's turn of ``round_no`` (queue ``thinker``)."""
    step_id = f"{round_no}:thinker"
    with _step(self, job_id, step_id, (job_id, round_no)) as lease:
        rt = get_runtime()
        spec, task = _load(job_id)
        if rt.store.cancel_requested(job_id):
            return finish(job_id, "cancelled")
        hooks = EventHooks(rt.store, job_id)
        memory = rt.store.memory(job_id)
        spent = budget_spent(spec, memory)
        if spent is not None and memory.get_message(round_no, "thinker") is None:
            return finish(job_id, "truncated", spent)
        try:
            if memory.get_message(round_no, "thinker") is None:
                hooks.round_started(round_no, task.max_rounds)
            rt.store.set_status(job_id, state="running", round=round_no, step="thinker")
            tools, _ = task.recommend()
            steps.thinker_step(rt.model("thinker"), task, memory, round_no, tools, hooks=hooks)
        except CapacityWait as wait:
            raise wait_for_capacity(self, lease, job_id, step_id, (job_id, round_no), wait) from None
        except Exception as exc:
            return finish(job_id, "failed", _failure(exc))
        return _advance(self, job_id, step_id, "actor", actor_turn.si(job_id, round_no))


@app.task(name="tandem.actor_turn", bind=True)
def actor_turn(self: CeleryTask, job_id: str, round_no: int) -> Any:
    """The Actor's turn of ``round_no`` (queue ``actor``); also the single model of mono jobs."""
    step_id = f"{round_no}:actor"
    with _step(self, job_id, step_id, (job_id, round_no)) as lease:
        rt = get_runtime()
        spec, task = _load(job_id)
        if rt.store.cancel_requested(job_id):
            return finish(job_id, "cancelled")
        mode: steps.Mode = "mono" if spec.reasoner == "mono" else "dual"
        hooks = EventHooks(rt.store, job_id)
        memory = rt.store.memory(job_id)
        spent = budget_spent(spec, memory)
        if spent is not None and memory.get_message(round_no, "actor") is None:
            return finish(job_id, "truncated", spent)
        try:
            if mode == "mono" and memory.get_message(round_no, "actor") is None:
                hooks.round_started(round_no, task.max_rounds)
            rt.store.set_status(job_id, state="running", round=round_no, step="actor")
            tools, actions = task.recommend()
            reply = steps.actor_step(
                rt.model("actor", mode), task, memory, round_no, tools, actions, mode=mode, hooks=hooks
            )
            nxt = steps.plan_next(task, reply, round_no)
        except CapacityWait as wait:
            raise wait_for_capacity(self, lease, job_id, step_id, (job_id, round_no), wait) from None
        except Exception as exc:
            return finish(job_id, "failed", _failure(exc))
        if nxt.kind == "deliver":
            return _advance(self, job_id, step_id, "finalize", finalize.si(job_id, "completed"))
        if nxt.kind == "truncated":
            return _advance(self, job_id, step_id, "finalize", finalize.si(job_id, "truncated"))
        if nxt.kind == "continue":
            return _advance(self, job_id, step_id, "next round", first_step(spec, job_id, round_no + 1))
        count = len(nxt.calls)
        return _advance(self, job_id, step_id, f"tools x{count}", _fan_out(job_id, round_no, count))


def _cancelled_call(index: int) -> dict[str, Any]:
    return FunctionCallResult(
        index=index, name="(cancelled)", status=FunctionCallStatus.FAILED, output="the job was cancelled"
    ).model_dump(mode="json")


@app.task(name="tandem.run_tool", bind=True)
def run_tool(self: CeleryTask, job_id: str, round_no: int, index: int) -> dict[str, Any]:
    """Run call ``index`` of the Actor's reply in ``round_no`` (queue ``tools``).

    A call whose result is stored is never run again: its stored result is returned.
    """
    rt = get_runtime()
    stored = rt.store.tool_result(job_id, round_no, index)
    if stored is not None:
        return stored.model_dump(mode="json")
    if rt.store.cancel_requested(job_id) or rt.store.result(job_id) is not None:
        return _cancelled_call(index)
    step_id = f"{round_no}:tool:{index}"
    lease = StepLease(
        rt.redis,
        rt.lease_keys,
        f"{job_id}:{step_id}",
        rt.settings.lease_seconds,
        _dispatch(self, (job_id, round_no, index)),
    )
    if not lease.acquire():
        raise Ignore()  # a live worker runs this call and will report it to the chord
    with lease:
        try:
            spec, task = _load(job_id)
            reply = rt.store.memory(job_id).get_message(round_no, "actor")
            if reply is None:
                raise LookupError(f"the Actor's reply of round {round_no} is not in memory")
            call = steps.calls_of(reply)[index - 1]
            call_id = reply.tool_calls[index - 1].id if reply.tool_calls else None
            tools, _ = task.recommend()
            hooks = EventHooks(rt.store, job_id)
            hooks.tool_called(round_no, index, call)
            ctx = steps.tool_context(task, round_no).model_copy(update={"call_index": index})
            by_name = {t.name: t for t in tools}
            if spec.reasoner == "react":  # injected values dropped, native argument errors in native words
                result = react.run_call(rt.runner, by_name, call, index, ctx, call_id=call_id)
            else:
                result = rt.runner.run_call(by_name, call, index, ctx, call_id=call_id)
        except Ignore:
            raise
        except Exception as exc:  # the chord must always hear back, or the job would hang
            result = FunctionCallResult(
                index=index, name="(unknown)", status=FunctionCallStatus.FAILED, output=_failure(exc)
            )
        if rt.store.save_tool_result(job_id, round_no, result):
            EventHooks(rt.store, job_id).tool_returned(round_no, result)
        final = rt.store.tool_result(job_id, round_no, index) or result
        return final.model_dump(mode="json")


@app.task(name="tandem.collect_tools", bind=True)
def collect_tools(self: CeleryTask, job_id: str, round_no: int, count: int) -> Any:
    """The chord callback: store the round's tool results in memory, then open the next round."""
    step_id = f"{round_no}:collect"
    with _step(self, job_id, step_id, (job_id, round_no, count)):
        rt = get_runtime()
        spec, task = _load(job_id)
        if rt.store.cancel_requested(job_id):
            return finish(job_id, "cancelled")
        results = rt.store.tool_results(job_id, round_no, count)
        missing = [i for i, r in enumerate(results, start=1) if r is None]
        if missing:
            return finish(
                job_id, "failed", f"tool results of round {round_no} are missing for calls {missing}"
            )
        found = [r for r in results if r is not None]
        stored = steps.apply_tool_results(rt.store.memory(job_id), round_no, found)
        if spec.reasoner == "react":  # a return_direct result ends the job; the budget counts steps
            nxt = react.react_after_tools(task, stored.function_results, round_no)
            if nxt.kind in ("deliver", "truncated"):
                status = "completed" if nxt.kind == "deliver" else "truncated"
                return _advance(self, job_id, step_id, "finalize", finalize.si(job_id, status))
            return _advance(self, job_id, step_id, "next round", first_step(spec, job_id, round_no + 1))
        if round_no + 1 >= task.max_rounds:
            return _advance(self, job_id, step_id, "finalize", finalize.si(job_id, "truncated"))
        return _advance(self, job_id, step_id, "next round", first_step(spec, job_id, round_no + 1))


@app.task(name="tandem.finalize", bind=True)
def finalize(self: CeleryTask, job_id: str, status: str, error: str | None = None) -> dict[str, Any]:
    """Store and return the final ``JobResult``; running it twice returns the stored result.

    A job this store never started (a forged or stale message) is ignored: nothing is written.
    """
    if get_runtime().store.spec(job_id) is None:
        raise Ignore()
    return finish(job_id, status, error)


@app.task(name="tandem.react_turn", bind=True)
def react_turn(self: CeleryTask, job_id: str, round_no: int) -> Any:
    """A ReAct model step (queue ``actor``)."""
    from tandem.tasks.react_turns import react_step

    return react_step(self, job_id, round_no)
