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
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from celery import Task as CeleryTask
from celery.exceptions import Ignore
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from tandem.reasoner.errors import ReasonerError, TransientModelError
from tandem.reasoner.loop.calls import call_context
from tandem.reasoner.loop.plan import LoopPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus
from tandem.tasks.app import app
from tandem.tasks.control.parking import announce, approved_call, park_for
from tandem.tasks.errors import JobError
from tandem.tasks.events import EventHooks, streams
from tandem.tasks.hosts.budgets import budget_spent, message_priority
from tandem.tasks.hosts.host_model import CapacityWait
from tandem.tasks.job_events import JobStarted, Waiting
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import JobResult, JobSpec, validate_spec
from tandem.tasks.state.claims import Claim, ClaimRefused, Message, Park
from tandem.tasks.state.leases import Heartbeat
from tandem.tasks.state.pending import DeferredHooks, PendingMemory
from tandem.tasks.state.results import end_job as end_job_durably
from tandem.tasks.state.store import StepView
from tandem.toolkit.errors import ToolkitError
from tandem.toolkit.redaction import redact, redact_known

log = logging.getLogger("tandem.tasks")
T = TypeVar("T")

STEP_TASKS: dict[str, str] = {
    "thinker": "tandem.thinker_turn",
    "actor": "tandem.actor_turn",
    "tools": "tandem.run_tool",
    "collect": "tandem.collect_tools",
    "finalize": "tandem.finalize",
}
"""The task that wakes each kind of step."""

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientModelError, RedisError, OperationalError)
"""Failures a step waits out (rescheduled with back-off) instead of failing the job."""


# -- sending -------------------------------------------------------------------------------


def step_messages(job_id: str, step: Step, indices: Sequence[int] | None = None) -> list[Message]:
    """The messages that wake ``step`` (every call of a ``tools`` step, or only ``indices``)."""
    if step.kind == "tools":
        chosen = indices if indices is not None else range(1, step.calls + 1)
        return [{"task": STEP_TASKS["tools"], "args": [job_id, step.round, i]} for i in chosen]
    return [{"task": STEP_TASKS[step.kind], "args": [job_id, step.round]}]


def send(messages: Sequence[Message], priority: int | None = None) -> None:
    """Send ``messages`` (each under a fresh task id: revoking one never touches another step),
    with the broker ``priority`` of their job."""
    for m in messages:
        args = m["args"]
        tail = ".".join(str(a) for a in args[1:])
        app.send_task(
            m["task"],
            args=args,
            countdown=m.get("countdown"),
            task_id=f"{args[0]}.{tail}.{uuid.uuid4().hex[:8]}",
            priority=priority,
            # Nobody waits for a step's own result: without this the Redis result backend would
            # subscribe to it (where a pool lets tasks join, e.g. gevent's).
            ignore_result=True,
        )


def job_priority(rt: Runtime, job_id: str) -> int | None:
    """The broker priority of a job's messages (``JobSpec.priority``), ``None`` if unknown."""
    spec = rt.store.spec(job_id)
    return None if spec is None else message_priority(spec.priority, rt.settings.broker_url)


def send_outbox(
    rt: Runtime,
    job_id: str,
    written: tuple[str, Sequence[Message]] | None = None,
    spec: JobSpec | None = None,
) -> bool:
    """Send the job's outbox and clear it; ``False`` (kept for the reconciler) if sending failed.

    ``written``: the outbox id and messages the caller's transition just wrote, and ``spec`` the
    job's spec, so that neither is read back.
    """
    try:
        outbox_id, messages = written if written is not None else rt.machine.outbox(job_id)
        if messages:
            known = spec is not None
            priority = message_priority(spec.priority, rt.settings.broker_url) if spec else None
            send(messages, priority if known else job_priority(rt, job_id))
            rt.machine.mark_sent(job_id, outbox_id)
        return True
    except Exception:
        log.warning("job %s: sending the next step failed; the reconciler sends it", job_id, exc_info=True)
        return False


def _retrying(rt: Runtime, action: Callable[[], T]) -> T:
    """Run a Redis write, retrying connection errors for up to one lease period (the write is
    idempotent). Raises the last error after that: the reconciler takes over."""
    give_up = time.monotonic() + max(rt.settings.lease_seconds, 5.0)
    pause = 0.2
    while True:
        try:
            return action()
        except RedisError:
            if time.monotonic() >= give_up:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


# -- ending ----------------------------------------------------------------------------------


def finish(
    job_id: str,
    status: str,
    error: str | None = None,
    *,
    claim: Claim | None = None,
    spec: JobSpec | None = None,
) -> dict[str, Any]:
    """End the job with ``status`` (the first result stored wins) and return the stored result.

    With ``claim`` only the claimed step may end the job (a lost claim ends nothing); without, the
    job ends whatever step it is at (cancel, deadline, give-up). ``spec``: the job's, when the
    caller has it (else it is read).
    """
    rt = get_runtime()
    spec = spec or rt.store.spec(job_id)
    memory = rt.store.memory(job_id)
    plan = rt.plan(spec) if spec is not None else None
    outcome_status = status if status in ("completed", "truncated") else "failed"
    if plan is not None:
        outcome = plan.outcome(memory, outcome_status, error)  # type: ignore[arg-type]
        deliverable, rounds, usage = outcome.deliverable, outcome.rounds, outcome.usage
        error = error or outcome.error
    else:
        outcome, deliverable, rounds, usage = None, "", 0, None
    error = error if status != "completed" else None
    result = JobResult(
        job_id=job_id,
        status=status,  # type: ignore[arg-type]
        deliverable=redact_known(deliverable) if status in ("completed", "truncated") else "",
        rounds=rounds,
        error=redact(error) if error else None,
        **({"usage": usage} if usage is not None else {}),
    )
    ttl = rt.settings.memory_ttl
    first, stored = end_job_durably(rt.store, result, ttl, claim=claim, delivery=rt.delivery)
    if stored is None:  # a lost claim, and nobody ended the job: nothing to report
        raise Ignore()
    if first and outcome is not None:
        EventHooks(rt.store, job_id).finished(outcome)
    return stored.model_dump(mode="json")


def end_job(job_id: str, reason: str, detail: str = "") -> dict[str, Any] | None:
    """End a job the reconciler or a refused claim gave up on: ``deadline``, ``give-up`` or
    ``cancel``."""
    rt = get_runtime()
    if reason == "cancel":
        return finish(job_id, "cancelled")
    record = rt.machine.record(job_id)
    where = f"step {record.get('kind', '?')} of round {record.get('round', '?')}"
    if reason == "deadline":
        last = record.get("last_error") or "none"
        spec = rt.store.spec(job_id)
        timeout = (spec.timeout_s if spec else None) or rt.settings.job_timeout
        message = f"the job's deadline passed (timeout_s={timeout:g}) at {where}; last error: {last}"
    else:
        message = (
            f"{where}{' call ' + detail if detail else ''} lost its worker more than "
            f"{rt.settings.max_lease_expiries} times (lease expiries); giving up"
        )
    return finish(job_id, "failed", message)


def _refused(job_id: str, refused: ClaimRefused) -> None:
    if refused.reason in ("deadline", "give-up"):
        end_job(job_id, refused.reason)
    raise Ignore()


def _failure(exc: BaseException) -> str:
    if not isinstance(exc, ReasonerError | JobError | ToolkitError):
        log.exception("step failed unexpectedly")
    return redact(f"{type(exc).__name__}: {exc}")


def _backoff(exc: BaseException, retries: int) -> float:
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float) and retry_after > 0:
        return float(retry_after)
    return min(2.0**retries, 60.0) * random.uniform(0.8, 1.2)


def reschedule(
    rt: Runtime,
    claim: Claim,
    delay: float,
    reason: str,
    error: str,
    *,
    send_now: bool | Callable[[], bool] = True,
    host: str | None = None,
) -> dict[str, Any] | None:
    """Park the claimed step in ``waiting`` and send it again in ``delay`` seconds, holding no
    worker thread meanwhile (publishes a ``waiting`` event). Past the job's deadline the job
    fails with ``error``. Also the path for a step that cannot get model-host capacity.

    ``send_now`` may be a callable, asked only once the step is parked (a step waiting for a
    slot registers for its wake-up then, ``tandem.tasks.control.waiting``): ``False`` leaves the copy in
    the outbox."""
    step = Step(claim.round, claim.kind)  # type: ignore[arg-type]
    outbox = [{**m, "countdown": round(delay, 3)} for m in step_messages(claim.job_id, step)]
    until = rt.machine.reschedule(claim, delay, reason, error, outbox)
    if until == "deadline":
        return finish(
            claim.job_id, "failed", f"the job's deadline came while waiting for {reason}; last error: {error}"
        )
    if isinstance(until, str):
        raise Ignore()
    waiting = Waiting(
        round=claim.round, step=claim.kind, reason=reason, until=until, error=error, detail=error, host=host
    )
    rt.store.publish(claim.job_id, waiting)
    log.warning(
        "job %s: %s; %s of round %d runs again in %.1f s", claim.job_id, error, claim.kind, claim.round, delay
    )
    if callable(send_now):
        send_now = send_now()
    if send_now:  # else a capacity waiter's wake-up (or the reconciler) sends it
        send_outbox(rt, claim.job_id)
    raise Ignore()


def _step_failed(rt: Runtime, claim: Claim, exc: BaseException) -> dict[str, Any] | None:
    if isinstance(exc, TRANSIENT_ERRORS):
        reason = "the model host" if isinstance(exc, TransientModelError) else "Redis or the broker"
        retries = int(rt.machine.record(claim.job_id).get("retries") or 0)
        return reschedule(rt, claim, _backoff(exc, retries), reason, f"{type(exc).__name__}: {exc}")
    return finish(claim.job_id, "failed", _failure(exc), claim=claim)


# -- steps -----------------------------------------------------------------------------------


def _claim(rt: Runtime, job_id: str, round_no: int, kind: str) -> Claim:
    got = rt.machine.claim(job_id, round_no, kind, rt.settings.lease_seconds, rt.settings.max_lease_expiries)
    if isinstance(got, ClaimRefused):
        _refused(job_id, got)
    assert isinstance(got, Claim)
    return got


def _load(view: StepView) -> tuple[JobSpec, LoopPlan]:
    if view.spec is None:
        raise Ignore()  # unknown or expired job: nothing to do
    return view.spec, get_runtime().plan(view.spec)


def _commit(
    rt: Runtime,
    claim: Claim,
    nxt: Step,
    memory: PendingMemory,
    hooks: DeferredHooks,
    spec: JobSpec,
    park: Park | None = None,
) -> None:
    """Store the step's writes and move to ``nxt`` (parked for approval with ``park``: its held
    calls are not sent); then publish its events and send ``nxt``."""
    tx = uuid.uuid4().hex  # also the id of the outbox the transition writes
    free = None if park is None else [i for i in range(1, nxt.calls + 1) if i not in park.held]
    messages = step_messages(claim.job_id, nxt, free)
    moved = _retrying(
        rt,
        lambda: rt.machine.transition(
            claim, (nxt.round, nxt.kind, nxt.calls, nxt.status), messages, memory.writes(), tx=tx, park=park
        ),
    )
    if not moved:
        log.warning(
            "job %s: %s of round %d lost its claim (epoch %d); its work is dropped",
            claim.job_id,
            claim.kind,
            claim.round,
            claim.epoch,
        )
        raise Ignore()
    hooks.flush()
    if park is not None:
        announce(rt.store, claim.job_id, park)
    if nxt.kind == "finalize":
        # Ending the job needs no other worker: it ends here, at once (one hop less per job). The
        # finalize message stays in the outbox until the job has ended, for the reconciler.
        finalize_step(claim.job_id, nxt.round, status=nxt.status or None, spec=spec)
        return
    send_outbox(rt, claim.job_id, (tx, messages), spec)
    # Returned, not raised: Celery formats a traceback for every ``Ignore`` (a step task stores
    # no result, so returning costs nothing).


def model_step(job_id: str, round_no: int, kind: str) -> dict[str, Any] | None:
    """Run model step ``kind`` (``thinker`` or ``actor``) of ``round_no`` and move the job on."""
    rt = get_runtime()
    claim = _claim(rt, job_id, round_no, kind)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        view = rt.store.step_view(job_id)  # spec, cancel flag and memory in one round trip
        spec, plan = _load(view)
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
            from tandem.tasks.control.waiting import wait_for_capacity

            return wait_for_capacity(rt, claim, spec, wait)
        except Exception as exc:
            return _step_failed(rt, claim, exc)
        _commit(rt, claim, nxt, memory, hooks, spec, park)
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
        error = redact(str(exc)) if isinstance(exc, JobError | ToolkitError) else _failure(exc)
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
    got = rt.machine.claim_call(
        job_id, round_no, index, rt.settings.lease_seconds, rt.settings.max_lease_expiries
    )
    if isinstance(got, ClaimRefused):
        _refused(job_id, got)
    claim = got
    assert isinstance(claim, Claim)
    hooks = EventHooks(rt.store, job_id)
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        try:
            view = rt.store.step_view(job_id, messages=[f"{round_no}:actor"])
            spec, plan = _load(view)
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
            result = _call_failed(index, "(unknown)", _failure(exc))
        collect = step_messages(job_id, Step(round_no, "collect"))
        outbox_id = uuid.uuid4().hex
        moved = _retrying(
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
    claim = _claim(rt, job_id, round_no, "collect")
    with Heartbeat(rt.machine, claim, rt.settings.lease_seconds):
        keys = [f"{round_no}:actor", f"{round_no}:tool"]  # the round's messages, not the whole memory
        view = rt.store.step_view(job_id, messages=keys, record=["calls"])
        spec, plan = _load(view)
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
        _commit(rt, claim, nxt, memory, DeferredHooks(EventHooks(rt.store, job_id)), spec)
    return None


@app.task(name="tandem.finalize", bind=True)
def finalize(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> dict[str, Any]:
    """Store and return the final ``JobResult`` with the status the job's record holds."""
    return finalize_step(job_id, round_no)


def finalize_step(
    job_id: str, round_no: int, *, status: str | None = None, spec: JobSpec | None = None
) -> dict[str, Any]:
    """The ``finalize`` step: woken by ``tandem.finalize``, or run at once by the step that moved
    the job there (which passes the ``status`` it wrote in the record, and the job's ``spec``)."""
    rt = get_runtime()
    claim = _claim(rt, job_id, round_no, "finalize")
    status = status or rt.machine.record(job_id).get("status") or "completed"
    return finish(job_id, status, claim=claim, spec=spec)
