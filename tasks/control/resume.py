"""Resume and fork: ``tandem.resume`` continues an ended job under its own id, ``tandem.fork``
starts a new job from the first rounds of another. Both by name, from any Celery client::

    app.send_task("tandem.resume", kwargs={"job_id": job_id, "max_rounds": 30}).get()
    app.send_task("tandem.fork", kwargs={"job_id": job_id, "round": 2, "goal": "..."}).get()

Both are consumed from the intake queue (like ``tandem.infer``).

**Resume** takes a ``failed``, ``cancelled`` or ``truncated`` job and walks its plan over the
stored memory (``tandem.reasoner.loop.replay``) to the first step with nothing stored: stored model
replies and tool results are reused, never redone (a tool step's calls with a stored result count
as done; the placeholder a cancelled job stored for a call it never ran does not). ``max_rounds``
raises the round budget (the stored spec is updated); it must be above the rounds already used.
One atomic script (``tandem.tasks.state.reopen``) reopens the record, so two concurrent resumes reopen
it once. The old result goes (from the job's keys and from Celery's result backend): the job's
``result()`` waits for the new end. A ``job_started`` event with ``resumed: true`` marks the
new run in the job's stream.

**Fork** copies rounds ``0..round-1`` of a job's memory into a new job with the same spec (the
goal, and the budget ``max_rounds``, replaced if given) and runs it from there; the source job is
untouched. Its stream opens with a ``job_started`` event with ``forked_from``.

**Tenant caps.** A resumed or forked job goes through the tenant gate like a submitted one
(``tandem.tasks.tenants.gate``): admitted, its step is sent and it counts against its tenant's
``max_running_jobs`` (and the fleet's) until its end releases the slot; else it is held (state
``waiting``, ``wait_for: tenant``, its step kept in the outbox, no message) until the fair pick
starts it. A spawned child resumed within its parent's run stays uncounted. Daily quotas refuse
new submissions only: a resume or fork is not refused for them.

**Owners.** Both take ``owner``, the tenant asking (``default`` when left out): another tenant's
job is refused as an unknown one. Both keep the job's owner, so a fork runs with its source's
sealed secrets only for the source's own tenant (``tandem.tasks.control.owners``).

The tasks answer ``{"job_id", "accepted": true, "round", "step", "max_rounds"}`` (a fork adds
``fork_id``, the new job's id; ``"waiting": true`` and the job's ``tenant`` when it waits for its
tenant's turn) or ``{"job_id", "accepted": false, "error", "reason"}``: a refused
request changes nothing. Refused: unknown ids and jobs whose records expired
(``TANDEM_MEMORY_TTL``), jobs that have not ended, a completed job (resume), a truncated job whose
budget was not raised (or a fork whose kept rounds spend it), ``max_rounds`` not above the rounds
used, a ``round`` outside the stored rounds. Running either task twice is safe: a second resume
finds the job running and is refused; a redelivered fork finds the fork it made (its id comes from
the task's id).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from celery import Task as CeleryTask

from tandem.reasoner.loop.replay import ResumePoint, resume_point, rounds_used
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, ModelMessage
from tandem.tasks.app import app
from tandem.tasks.control.owners import UNKNOWN, no_such_job, unknown_job, visible
from tandem.tasks.errors import JobError, ResumeRefused
from tandem.tasks.job_events import JobStarted
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import FINAL_STATES, JobSpec, validate_spec
from tandem.tasks.state.artifacts import copy_artifacts
from tandem.tasks.state.reopen import RESUMABLE_STATES, Placement, Reopened, Reopener
from tandem.tasks.steps.context import enter_job_scope
from tandem.tasks.steps.dispatch import send_outbox
from tandem.tasks.steps.hand_back import check_versions
from tandem.tasks.steps.messages import step_messages
from tandem.tasks.steps.tools import never_ran
from tandem.tasks.tenants.gate import STARTS, gate_of
from tandem.tasks.tracing import control_span
from tandem.tasks.webhooks.delivery import arm as arm_webhooks
from tandem.toolkit.errors import ToolkitError

_FORK_IDS = uuid.UUID("8f1d7f0e-3c55-4c1e-9a52-6f0c1f2b7d11")
"""Namespace of fork ids derived from the fork task's id (a redelivered fork finds its fork)."""


_DONE = {"resume": "resumed", "fork": "forked"}


def ran(result: FunctionCallResult) -> bool:
    """False for the placeholder a cancelled job stores for a call it never ran."""
    return not never_ran(result)


def _ended_job(rt: Runtime, job_id: Any, doing: str, owner: Any = None) -> tuple[dict[str, str], JobSpec]:
    """The record and spec of an ended job of tenant ``owner`` (``default`` if none), its secret
    scope entered; or ``ResumeRefused`` saying why not (the one refusal, reason ``unknown``, for a
    job that does not exist or is another tenant's: ``tandem.tasks.control.owners``)."""
    if not visible(rt.machine, job_id, owner):
        raise ResumeRefused(no_such_job(job_id), UNKNOWN)
    record = rt.machine.record(job_id)
    if not record:  # it expired since it was looked at
        raise ResumeRefused(no_such_job(job_id), UNKNOWN)
    state = record.get("state", "")
    if state not in FINAL_STATES:
        raise _not_ended(job_id, state, doing)
    spec = rt.store.spec(job_id)
    if spec is None and record.get("created_at"):  # a worker started it; its keys expire one by one
        raise ResumeRefused(no_such_job(job_id), UNKNOWN)
    if spec is None:  # cancelled while queued: no worker ever started it
        raise ResumeRefused(
            f"job {job_id!r} ended ({state}) before a worker started it: it has nothing to go on "
            "from; submit it again",
            "state",
        )
    enter_job_scope(rt, job_id, spec)  # what resume or fork writes and logs masks the job's own secrets
    return record, spec


def _not_ended(job_id: str, state: str, doing: str) -> ResumeRefused:
    return ResumeRefused(
        f"job {job_id!r} is {state}, not ended: only an ended job can be {_DONE[doing]} "
        "(wait for it to end, or cancel it first)",
        "state",
    )


def _placement(job_id: str, point: ResumePoint) -> Placement:
    step = point.step
    if step.kind == "tools":
        outbox = step_messages(job_id, step, point.todo)
        return Placement(step.round, "tools", outbox, calls=step.calls, pending=len(point.todo))
    return Placement(step.round, step.kind, step_messages(job_id, step), calls=step.calls, status=step.status)


def _walk(
    rt: Runtime, job_id: str, spec: JobSpec, memory: ReasonerMemory, results: Callable[..., Any]
) -> ResumePoint:
    try:
        task = rt.task_for(job_id, spec)
        return resume_point(rt.plan(spec), task, memory, results, done=ran)
    except (JobError, ToolkitError) as exc:
        raise ResumeRefused(f"job {job_id!r} cannot run on this worker: {exc}", "invalid") from None


def _go_live(rt: Runtime, job_id: str, spec: JobSpec) -> tuple[float, int]:
    """Index the job as live (before its record is reopened: the reconciler drops an index entry
    whose job turns out ended) and return its timeout and TTL after the end."""
    timeout = spec.timeout_s or rt.settings.job_timeout
    first_look = min(rt.settings.lease_seconds, rt.settings.stall_seconds)
    rt.machine.index(job_id, time.time() + first_look, int(timeout + rt.settings.memory_ttl))
    arm_webhooks(rt, job_id, spec)  # the run's park and end are owed deliveries (tandem.tasks.webhooks)
    return timeout, rt.settings.memory_ttl


def _refusal(job_id: str, got: Reopened, doing: str) -> ResumeRefused:
    if got.outcome == "gone":
        return ResumeRefused(
            f"job {job_id!r} expired while it was being {_DONE[doing]}; nothing changed", "unknown"
        )
    if got.outcome == "moved":
        return ResumeRefused(
            f"job {job_id!r} changed while it was being {_DONE[doing]} (another resume?); it is {got.state} "
            "now: look at its status and try again",
            "state",
        )
    if got.state not in FINAL_STATES:  # another resume reopened it first
        return _not_ended(job_id, got.state, doing)
    return ResumeRefused(f"job {job_id!r} is {got.state}: it cannot be {_DONE[doing]}", "state")


def _started(rt: Runtime, job_id: str, spec: JobSpec, at: Placement, **extra: Any) -> str:
    started = JobStarted(spec=spec.public_dump(), round=at.round, step=at.kind, **extra)
    return rt.store.publish(job_id, started)


def _admitted(rt: Runtime, job_id: str, spec: JobSpec, epoch: int, doing: str) -> dict[str, Any]:
    """Send the reopened job's step now, or hold it for its tenant's turn, as intake does with a new
    job (``tandem.tasks.tenants.gate``): what the answer gains (``waiting`` and the ``tenant``
    when it waits). Admitted, it counts against its tenant's cap until its end."""
    gate = gate_of(rt)
    verdict = gate.admit(job_id, spec) if gate is not None else STARTS[0]
    if gate is None or verdict in STARTS:
        send_outbox(rt, job_id)
        return {}
    gate.hold(job_id, spec, True, verdict, epoch=epoch, step=doing)
    return _waiting(rt, job_id, spec)


def _waiting(rt: Runtime, job_id: str, spec: JobSpec) -> dict[str, Any]:
    """``waiting`` and the ``tenant`` for a job held for its tenant's turn (none once it started)."""
    record = rt.machine.record(job_id)
    if record.get("state") == "waiting" and record.get("wait_for") == "tenant":
        return {"waiting": True, "tenant": spec.owner}
    return {}


def _budget(job_id: str, max_rounds: Any, used: int, spec: JobSpec) -> int | None:
    """``max_rounds`` checked against the ``used`` rounds (``None``: keep the spec's)."""
    if max_rounds is None:
        return None
    if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds <= used:
        raise ResumeRefused(
            f"max_rounds={max_rounds!r}: job {job_id!r} has used {used} round(s) already; give a "
            f"whole number above {used}, or leave max_rounds out to keep {spec.max_rounds}",
            "invalid",
        )
    return max_rounds


def _changed(rt: Runtime, spec: JobSpec, **changes: Any) -> JobSpec:
    """``spec`` with ``changes`` (those not ``None``), validated like a submitted spec."""
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        return spec
    try:
        return validate_spec({**spec.model_dump(mode="json"), **changes}, rt.settings.limits)
    except JobError as exc:
        raise ResumeRefused(str(exc), "invalid") from None


def resume_job(rt: Runtime, job_id: Any, max_rounds: Any = None, *, owner: Any = None) -> dict[str, Any]:
    """Reopen ended job ``job_id`` at its first step with nothing stored (see the module
    docstring) and send that step; the task's answer. ``ResumeRefused`` says why not. ``owner``:
    the tenant asking; the job keeps its own."""
    record, spec = _ended_job(rt, job_id, "resume", owner)
    state = record["state"]
    if state not in RESUMABLE_STATES:
        raise ResumeRefused(
            f"job {job_id!r} is {state}: nothing to resume (only failed, cancelled or truncated jobs "
            "resume); fork it to run it again from one of its rounds",
            "state",
        )
    memory = rt.store.memory(job_id)
    used = rounds_used(memory)
    spec = _changed(rt, spec, max_rounds=_budget(job_id, max_rounds, used, spec))
    point = _walk(rt, job_id, spec, memory, lambda r, n: rt.store.tool_results(job_id, r, n))
    if point.step.kind == "finalize" and point.step.status == "truncated":
        raise ResumeRefused(
            f"job {job_id!r} would end truncated again: its {used} stored round(s) spend "
            f"max_rounds={spec.max_rounds}; resume with max_rounds above {used}",
            "invalid",
        )
    at = _placement(job_id, point)
    forget = [i for i in point.todo if rt.store.tool_result(job_id, at.round, i) is not None]
    timeout, ttl_after = _go_live(rt, job_id, spec)
    got = Reopener(rt.machine).reopen(
        job_id,
        record.get("updated_at", ""),
        spec.model_dump_json(),
        spec.reasoner,
        at,
        timeout=timeout,
        ttl_after=ttl_after,
        forget=forget,
    )
    if got.outcome != "ok":
        raise _refusal(job_id, got, "resume")
    # The old Celery result must not answer for the new run (JobHandle reads the job's own
    # result key first, which the reopen removed; other clients read Celery's).
    with contextlib.suppress(Exception):
        app.backend.forget(job_id)
    event_id = _started(rt, job_id, spec, at, resumed=True, epoch=got.epoch)
    waits = _admitted(rt, job_id, spec, got.epoch, "resume")  # the tenant's cap, as for a new job
    return {
        "job_id": job_id,
        "accepted": True,
        "round": at.round,
        "step": at.kind,
        "max_rounds": spec.max_rounds,
        "previous_state": state,
        "event_id": event_id,
        **waits,
    }


def _stored_round(field: str) -> int:
    head = field.split(":", 1)[0]
    return int(head) if head.isdigit() else -1


def fork_job(
    rt: Runtime,
    job_id: Any,
    round_no: Any,
    goal: Any = None,
    max_rounds: Any = None,
    *,
    fork_id: str | None = None,
    owner: Any = None,
) -> dict[str, Any]:
    """Start a new job (id ``fork_id``, else a fresh one) from rounds ``0..round_no-1`` of ended
    job ``job_id``, its goal replaced by ``goal`` and its budget by ``max_rounds`` if given; the
    task's answer. Only the job's own tenant (``owner``) may fork it, and the fork keeps that
    owner (with the job's sealed secrets)."""
    _, spec = _ended_job(rt, job_id, "fork", owner)
    source = rt.store.memory(job_id)
    messages = source.get_messages()
    used = rounds_used(source)
    if isinstance(round_no, bool) or not isinstance(round_no, int) or not 1 <= round_no <= used:
        span = f"from 1 to {used}" if used else "none: it stored no round"
        raise ResumeRefused(
            f"round={round_no!r} is outside the stored rounds of job {job_id!r} (0..{used - 1}): the fork "
            f"keeps rounds 0..round-1, so round must be a whole number {span}",
            "invalid",
        )
    if goal is not None and not isinstance(goal, str):
        raise ResumeRefused(f"goal must be a string, got {type(goal).__name__}", "invalid")
    spec = _changed(rt, spec, goal=goal, max_rounds=_budget(job_id, max_rounds, round_no, spec))
    kept: list[ModelMessage] = [m for m in messages if m.round < round_no]
    raw_calls: Mapping[Any, Any] = rt.redis.hgetall(rt.store.key(job_id, "tools"))
    calls: dict[str, FunctionCallResult] = {}
    for field, value in raw_calls.items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        result = FunctionCallResult.model_validate_json(value)
        if _stored_round(name) < round_no and ran(result):
            calls[name] = result
    new_id = fork_id or str(uuid.uuid4())

    def results(r: int, n: int) -> list[FunctionCallResult | None]:
        return [calls.get(f"{r}:{i}") for i in range(1, n + 1)]

    point = _walk(rt, new_id, spec, InMemoryReasonerMemory(kept), results)
    if point.step.kind == "finalize" and point.step.status == "truncated":
        raise ResumeRefused(
            f"a fork of job {job_id!r} at round {round_no} would end truncated at once: its "
            f"{round_no} round(s) spend max_rounds={spec.max_rounds}; give max_rounds above {round_no}",
            "invalid",
        )
    at = _placement(new_id, point)
    answer = {"job_id": job_id, "accepted": True, "fork_id": new_id, "round": round_no, "step": at.kind}
    timeout, ttl_after = _go_live(rt, new_id, spec)
    # The fork reads the artifacts its rounds name, from its own keys: copied before its record is
    # written (each once), so a fork sent again after a lost worker finds them too.
    named = [r for m in kept if m.role == "tool" for r in m.function_results] + list(calls.values())
    handles = [r.artifact.handle for r in named if r.artifact is not None]
    copy_artifacts(rt.store.artifacts(job_id), rt.store.artifacts(new_id), handles)
    got = Reopener(rt.machine).start(
        new_id,
        spec.model_dump_json(),
        spec.reasoner,
        at,
        timeout=timeout,
        ttl_after=ttl_after,
        memory=[(m.key, m.model_dump_json()) for m in kept],
        call_results=[(k, v.model_dump_json()) for k, v in calls.items()],
        pause_seq=rt.machine.pause(job_id)[1],  # the fork's pause ids go on from its origin's
    )
    if got.outcome == "exists":  # a redelivered fork: the first run made it (and admitted it)
        return {**answer, "max_rounds": spec.max_rounds, **_waiting(rt, new_id, spec)}
    if got.outcome != "ok":
        raise _refusal(new_id, got, "fork")
    rt.store.remember(new_id, owner=spec.owner)
    _started(rt, new_id, spec, at, forked_from=job_id, forked_round=round_no)
    waits = _admitted(rt, new_id, spec, got.epoch, "fork")  # the tenant's cap, as for a new job
    return {**answer, "max_rounds": spec.max_rounds, **waits}


def _answer(job_id: Any, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return action()
    except ResumeRefused as exc:
        return {"job_id": job_id, "accepted": False, "error": str(exc), "reason": exc.reason}


@app.task(name="tandem.resume", acks_late=True)
def resume(job_id: str, max_rounds: int | None = None, owner: str | None = None) -> dict[str, Any]:
    """Resume ended job ``job_id`` for tenant ``owner`` (see the module docstring)."""
    rt = get_runtime()
    if not visible(rt.machine, job_id, owner):  # nothing of the job is read or traced
        return unknown_job("tandem.resume", job_id)
    check_versions(resume, rt.machine, job_id)  # formats this worker does not read: handed back
    with control_span(job_id, "resume", lambda: rt.store.spec(job_id)):
        return _answer(job_id, lambda: resume_job(rt, job_id, max_rounds, owner=owner))


@app.task(name="tandem.fork", bind=True, acks_late=True)
def fork(
    self: CeleryTask,
    job_id: str,
    round: int,
    goal: str | None = None,
    max_rounds: int | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """Fork job ``job_id`` at ``round`` for tenant ``owner`` (see the module docstring)."""
    check_versions(self, get_runtime().machine, job_id)  # formats this worker does not read: handed back
    fork_id = str(uuid.uuid5(_FORK_IDS, self.request.id)) if self.request.id else None
    return _answer(
        job_id, lambda: fork_job(get_runtime(), job_id, round, goal, max_rounds, fork_id=fork_id, owner=owner)
    )


__all__ = ["fork", "fork_job", "ran", "resume", "resume_job"]
