"""The Celery tasks of a job: thin wake-ups of the state machine (``tandem.tasks.state.machine``).

``tandem.infer`` (intake) creates the job's record at its first step and sends that step.
Every other task names a step, ``(job, round)`` plus its kind by the task's name:
``thinker_turn``, ``actor_turn`` (the model of mono and react jobs too), ``run_tool`` (one call
of a ``tools`` step), ``collect_tools``, ``finalize``. A task claims its step (nothing happens if
the job is elsewhere, ended, or a live worker holds the step), does the step's work, asks the
job's plan (``tandem.reasoner.loop``) what follows, commits (stores the step's messages and moves
the record to the next step, only if its claim still stands) and sends the outbox. Two steps need
no other worker and run at once in the thread that made them current, their message kept in the
outbox for the reconciler until they commit: ``collect`` (run by the call that stores a round's
last result) and ``finalize``.

So a duplicated, stale, forged or wrong-round message does nothing, a lost one is sent again by
the reconciler (``tandem.tasks.state.reconciler``), and a worker that lost its lease stores nothing.
Transient failures (a model host's 429/5xx/time-out, Redis or broker errors) park the step in
``waiting`` and send it again after a back-off, until the job's deadline.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from tandem.reasoner.loop.calls import call_context
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.tasks.app import app
from tandem.tasks.control.parking import approved_call, park_for
from tandem.tasks.control.waiting import wait_for_capacity
from tandem.tasks.errors import JobError
from tandem.tasks.events import EventHooks, streams
from tandem.tasks.hosts.budgets import budget_spent
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.job_events import JobStarted
from tandem.tasks.runtime import get_runtime
from tandem.tasks.spec import JobResult, JobSpec, validate_spec
from tandem.tasks.state.leases import Heartbeat
from tandem.tasks.state.pending import DeferredHooks, PendingMemory
from tandem.tasks.state.store import StepView
from tandem.tasks.steps.dispatch import send_outbox, step_messages
from tandem.tasks.steps.guard import (
    claim_call,
    claim_step,
    commit,
    describe_failure,
    finalize_step,
    finish,
    retrying,
    step_failed,
)
from tandem.toolkit.errors import ToolkitError
from tandem.toolkit.redaction import redact

log = logging.getLogger("tandem.tasks")


def load(view: StepView) -> tuple[JobSpec, LoopPlan]:
    if view.spec is None:
        raise Ignore()  # unknown or expired job: nothing to do
    return view.spec, get_runtime().plan(view.spec)


def model_step(job_id: str, round_no: int, kind: str) -> dict[str, Any] | None:
    """Run model step ``kind`` (``thinker`` or ``actor``) of ``round_no`` and move the job on."""
    rt = get_runtime()
    claim = claim_step(rt, job_id, round_no, kind)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        view = rt.store.step_view(job_id)  # spec, cancel flag and memory in one round trip
        spec, plan = load(view)
        if view.cancelled:
            return finish(job_id, "cancelled", claim=claim)
        task = rt.task_for(job_id, spec)
        memory = PendingMemory(rt.store.memory(job_id), view.messages)
        events = EventHooks(rt.store, job_id)
        hooks = DeferredHooks(events)
        step = Step(round_no, "thinker" if kind == "thinker" else "actor")
        spent = budget_spent(spec, memory)
        if spent is not None and memory.get_message(round_no, step.kind) is None:  # type: ignore[arg-type]
            return finish(job_id, "truncated", spent, claim=claim)
        try:
            role, mode = plan.model(step.kind)  # type: ignore[arg-type]
            if plan.starts_round(step) and memory.get_message(round_no, step.kind) is None:  # type: ignore[arg-type]
                hooks.round_started(round_no, plan.rounds(task))
            tools, actions = task.recommend()
            inputs = StepInputs(task, memory, tools, actions, hooks)
            model = rt.model(role, mode)
            events.live = streams(model)  # a reply not streamed gets no model_delta events
            reply = plan.run_model(step, model, inputs)
            nxt = plan.after_model(step, reply, task)
            wait_at_most = spec.approval_timeout_s or rt.settings.memory_ttl
            park = park_for(job_id, plan, nxt, reply, task, tools, max_wait=wait_at_most)
        except CapacityWait as wait:
            return wait_for_capacity(rt, claim, spec, wait)
        except Exception as exc:
            return step_failed(rt, claim, exc)
        commit(rt, claim, nxt, memory, hooks, spec, park)
    return None


@app.task(name="tandem.infer", bind=True)
def infer(self: CeleryTask, spec: dict[str, Any]) -> Any:
    """Start a job from its spec; the id of this task is the job id, its result the JobResult
    (stored when the job ends)."""
    job_id = self.request.id
    rt = get_runtime()
    try:  # a refused spec stores nothing: the answer is this task's result only
        job_spec = rt.check_spec(validate_spec(spec, rt.settings.limits))  # secrets sealed
        plan = rt.plan(job_spec)
        rt.task_for(job_id, job_spec).recommend()  # whatever else is wrong fails here, not later
    except Exception as exc:
        error = redact(str(exc)) if isinstance(exc, JobError | ToolkitError) else describe_failure(exc)
        refused = JobResult(job_id=job_id, status="failed", error=error).model_dump(mode="json")
        # Answer first, then undo the ``queued`` marker ``submit`` wrote for followers: the job is
        # never unknown in between. A backend that cannot take the answer gets it again later (the
        # same message, sent again with a countdown): a bare client waits for nothing else.
        try:
            self.backend.store_result(job_id, refused, "SUCCESS")
        except Exception as store_failed:
            log.warning("job %s: storing its refusal failed; trying again in 5 s", job_id)
            raise self.retry(countdown=5, max_retries=None, exc=store_failed) from None
        rt.store.discard_queued(job_id)
        return refused
    first = plan.opening(0)
    timeout = job_spec.timeout_s or rt.settings.job_timeout
    live_ttl = int(timeout + rt.settings.memory_ttl)
    first_look = min(rt.settings.lease_seconds, rt.settings.stall_seconds)
    rt.machine.index(job_id, time.time() + first_look, live_ttl)
    messages, outbox_id = step_messages(job_id, first), uuid.uuid4().hex
    created = rt.machine.create(
        job_id,
        job_spec.model_dump_json(),
        job_spec.reasoner,
        (first.round, first.kind),
        messages,
        timeout=timeout,
        ttl_after=rt.settings.memory_ttl,
        outbox_id=outbox_id,
    )
    if created:
        rt.store.started(job_id, JobStarted(spec=job_spec.public_dump()), live_ttl)
    # A job created by this call sends the outbox it wrote; a duplicate intake message sends what
    # the record's outbox still holds (nothing once sent).
    send_outbox(rt, job_id, (outbox_id, messages) if created else None, spec=job_spec)
    if self.request.ignore_result:  # as ``send_intake`` sends it: Celery stores nothing now
        return None
    raise Ignore()  # a bare client's message: the result is stored when the job ends, not now


@app.task(name="tandem.thinker_turn", bind=True)
def thinker_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The Thinker's turn of ``round_no`` (queue ``thinker``)."""
    return model_step(job_id, round_no, "thinker")


@app.task(name="tandem.actor_turn", bind=True)
def actor_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The Actor's turn of ``round_no`` (queue ``actor``): also the model of mono and react jobs."""
    return model_step(job_id, round_no, "actor")


@app.task(name="tandem.react_turn", bind=True)
def react_turn(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """The model step of a react job (an alias of ``tandem.actor_turn``, kept for old messages)."""
    return model_step(job_id, round_no, "actor")


def _call_failed(index: int, name: str, output: str) -> FunctionCallResult:
    return FunctionCallResult(index=index, name=name, status=FunctionCallStatus.FAILED, output=output)


CANCELLED_CALL = "the job was cancelled"
"""The output stored for a call its cancelled job never ran (a resumed job runs it)."""

INTERRUPTED = (
    "this call was interrupted (the worker running it was lost) and was not run again because "
    "the tool is at_most_once: it may or may not have taken effect; check before calling it again"
)


@app.task(name="tandem.run_tool", bind=True)
def run_tool(self: CeleryTask, job_id: str, round_no: int, index: int, *_: Any) -> dict[str, Any] | None:
    """Run call ``index`` of the Actor's reply in ``round_no`` (queue ``tools``).

    The call's start (its attempt) is recorded before it runs; its result is stored once; the
    call that stores the round's last result moves the job to ``collect``. An ``at_most_once``
    tool is marked started right before it runs; one whose earlier attempt got that far and was
    interrupted is not run again (its result is a failure saying so), while one interrupted before
    (a Redis outage while the call was loaded, say) runs.
    """
    rt = get_runtime()
    claim = claim_call(rt, job_id, round_no, index)
    hooks = EventHooks(rt.store, job_id)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        try:
            view = rt.store.step_view(job_id, messages=[f"{round_no}:actor"])
            spec, plan = load(view)
            task = rt.task_for(job_id, spec)
            reply = next(iter(view.messages or []), None)
            if reply is None:
                raise LookupError(f"the Actor's reply of round {round_no} is not in memory")
            call = plan.calls_of(reply)[index - 1]
            call_id = reply.tool_calls[index - 1].id if reply.tool_calls else None
            by_name = {t.name: t for t in task.recommend()[0]}
            tool = by_name.get(call.name)
            cleared = approved_call(rt.store, job_id, round_no, index, call, tool, task)
            if view.cancelled:
                result = _call_failed(index, call.name or "(cancelled)", CANCELLED_CALL)
            elif claim.started and tool is not None and tool.at_most_once:
                result = _call_failed(index, call.name, INTERRUPTED)
            elif isinstance(cleared, str):
                result = _call_failed(index, call.name, cleared)
            else:
                call, approved = cleared
                if tool is not None and tool.at_most_once and not rt.machine.call_started(claim):
                    raise Ignore()  # the claim was lost before the tool ran: its new holder runs it
                hooks.tool_called(round_no, index, call)
                ctx = call_context(task, round_no, index, claim.attempt)
                result = plan.run_call(
                    rt.runner, by_name, call, index, ctx, call_id=call_id, approved=approved
                )
        except Ignore:
            raise
        except (RedisError, OperationalError):
            log.warning(
                "job %s: call %d of round %d hit a Redis error; it will be sent again",
                job_id,
                index,
                round_no,
            )
            raise Ignore() from None
        except Exception as exc:  # the round must always hear back, or the job would wait for it
            result = _call_failed(index, "(unknown)", describe_failure(exc))
        collect = step_messages(job_id, Step(round_no, "collect"))
        outbox_id = uuid.uuid4().hex
        moved = retrying(
            rt, lambda: rt.machine.call_done(claim, result.model_dump_json(), collect, outbox_id=outbox_id)
        )
    if not moved:
        log.warning(
            "job %s: call %d of round %d lost its claim; its result is dropped", job_id, index, round_no
        )
        raise Ignore()
    hooks.tool_returned(round_no, result)
    if moved == 2:
        # The call that stored the round's last result collects at once, in this thread: one hop
        # less per tool round. The ``collect`` message stays in the outbox until the collect step
        # commits, so the reconciler sends it if this worker dies first.
        collect_step(job_id, round_no)
    return result.model_dump(mode="json")


@app.task(name="tandem.collect_tools", bind=True)
def collect_tools(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> Any:
    """Store the round's tool results in memory, then move to what the plan says follows."""
    return collect_step(job_id, round_no)


def collect_step(job_id: str, round_no: int) -> dict[str, Any] | None:
    """The ``collect`` step of ``round_no``: woken by ``tandem.collect_tools``, or run at once by
    the tool call that stored the round's last result."""
    rt = get_runtime()
    claim = claim_step(rt, job_id, round_no, "collect")
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        keys = [f"{round_no}:actor", f"{round_no}:tool"]  # the round's messages, not the whole memory
        view = rt.store.step_view(job_id, messages=keys, record=["calls"])
        spec, plan = load(view)
        if view.cancelled:
            return finish(job_id, "cancelled", claim=claim)
        count = int(view.record.get("calls") or 0)
        results = rt.store.tool_results(job_id, round_no, count)
        missing = [i for i, r in enumerate(results, start=1) if r is None]
        if missing:
            return finish(
                job_id,
                "failed",
                f"tool results of round {round_no} are missing for calls {missing}",
                claim=claim,
            )
        memory = PendingMemory(rt.store.memory(job_id), view.messages, asked=keys)
        stored = plan.record_tools(memory, round_no, [r for r in results if r is not None])
        nxt = plan.after_tools(rt.task_for(job_id, spec), stored.function_results, round_no)
        commit(rt, claim, nxt, memory, DeferredHooks(EventHooks(rt.store, job_id)), spec)
    return None


@app.task(name="tandem.finalize", bind=True)
def finalize(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> dict[str, Any]:
    """Store and return the final ``JobResult`` with the status the job's record holds."""
    return finalize_step(job_id, round_no)
