"""``tandem.infer``, the intake: check a job's spec, create its record at its first step, send it.

The id of the intake task is the job id. A refused spec stores nothing but this task's result (a
failed ``JobResult`` saying why; never under the id of a job that started: a copy of its message
cannot overwrite its result); an accepted one creates the record with the first step in its
outbox (a duplicate intake message creates nothing and sends what the outbox still holds). A
message whose spec is of a version this worker does not read (header ``tandem_spec_version``, from
a client of a newer release) goes back to the queue for a worker that reads it
(``tandem.tasks.steps.hand_back``). A message whose arguments do not fit
(``kwargs={"spec": {...}}``) never gets here: it fails with ``TaskCallError``
(``tandem.tasks.task_args``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import Task as CeleryTask
from celery.exceptions import Ignore

from tandem.broker_config.tokens import DEFAULT_TENANT, TENANT_ID
from tandem.reasoner import tracing
from tandem.tasks.app import app
from tandem.tasks.control.threads import index_job
from tandem.tasks.errors import JobError
from tandem.tasks.intake_secrets import concealed, holds_stored, resolve
from tandem.tasks.job_events import JobStarted
from tandem.tasks.runtime import get_runtime
from tandem.tasks.spec import JobResult, validate_spec
from tandem.tasks.steps.context import JobFixtures
from tandem.tasks.steps.dispatch import send_outbox, wire
from tandem.tasks.steps.guard import describe_failure
from tandem.tasks.steps.hand_back import check_intake
from tandem.tasks.steps.messages import step_messages
from tandem.tasks.task_args import SHAPE_VALUES
from tandem.tasks.tenants.gate import STARTS, gate_of
from tandem.tasks.tracing import job_span, outcome, step_span
from tandem.tasks.webhooks.delivery import arm as arm_webhooks
from tandem.toolkit.errors import ToolkitError
from tandem.toolkit.redaction import enter_scope, redact

log = logging.getLogger("tandem.tasks")


@app.task(name="tandem.infer", bind=True)
def infer(self: CeleryTask, spec: Any) -> Any:
    """Start a job from its spec; the id of this task is the job id, its result the JobResult
    (stored when the job ends). ``spec`` is annotated ``Any``: a spec that is not a JSON object is
    the job's refusal (a failed ``JobResult``), not the call's."""
    job_id = self.request.id
    # A secret still in clear (a bare client's message) is sealed in this message's arguments: the
    # copies sent again (hand-back, retry) carry it sealed (tandem.tasks.intake_secrets).
    box = get_runtime().secret_box
    spec = concealed(spec, box)
    if isinstance(self.request.kwargs, dict) and "spec" in self.request.kwargs:
        self.request.kwargs = {**self.request.kwargs, "spec": concealed(self.request.kwargs["spec"], box)}
    check_intake(self, job_id, get_runtime().machine.versions)  # a newer client's spec: handed back
    trace = spec.get("trace_context") if isinstance(spec, dict) else None
    parent = tracing.extract(trace) if isinstance(trace, dict) else None  # ``submit``'s job span
    if tracing.STATE.on and parent is None:  # a bare client's job: its trace starts here...
        stored = get_runtime().store.spec(job_id)  # ...unless a first copy of this message started it
        trace = stored.trace_context if stored is not None and stored.trace_context else None
        # (the job span opens under the message's ``traceparent`` header, if it has one)
        trace = trace or job_span(job_id)
        parent = tracing.extract(trace)
    with step_span(job_id, 0, "intake", parent=parent):
        return _intake(self, job_id, spec, trace if isinstance(trace, dict) else None)


def _intake(self: CeleryTask, job_id: str, spec: dict[str, Any], trace: dict[str, str] | None) -> Any:
    rt = get_runtime()
    try:  # a refused spec stores nothing: the answer is this task's result only
        if holds_stored(spec):  # secrets left in the job's intake key by ``submit``
            spec = resolve(spec, rt.machine.intake(job_id), job_id)
        job_spec = rt.check_spec(validate_spec(spec, rt.settings.limits))  # secrets sealed
        gate = gate_of(rt)
        over = gate.refusal(job_spec) if gate is not None else None
        if over is not None:  # a daily quota of its tenant is used up (tandem.tasks.tenants)
            raise JobError(over)
        if trace and job_spec.trace_context != trace:
            job_spec = job_spec.model_copy(update={"trace_context": trace})
        job = JobFixtures.build(rt, job_id, job_spec)
        enter_scope(job.scope)  # what intake writes masks the job's secrets (and no other job's)
        job.recommend()  # whatever else is wrong fails here, not later
    except Exception as exc:
        error = redact(str(exc)) if isinstance(exc, JobError | ToolkitError) else describe_failure(exc)
        if not isinstance(spec, dict):
            error = f'tandem.infer takes kwargs={{"spec": {SHAPE_VALUES["spec"]}}}: {error}'
        if rt.store.spec(job_id) is not None:  # a copy under a started job's id: never its answer
            log.warning(
                "message refused, nothing done: tandem.infer (job %s started already): %s", job_id, error
            )
            raise Ignore() from None
        owner = spec.get("owner") if isinstance(spec, dict) else None
        named = owner if isinstance(owner, str) and TENANT_ID.fullmatch(owner) else DEFAULT_TENANT
        refused = JobResult(job_id=job_id, status="failed", error=error, owner=named).model_dump(mode="json")
        # Answer first, then undo the ``queued`` marker ``submit`` wrote for followers: the job is
        # never unknown in between. A backend that cannot take the answer gets it again later (the
        # same message, sent again with a countdown): a bare client waits for nothing else.
        try:
            self.backend.store_result(job_id, refused, "SUCCESS")
        except Exception as store_failed:
            log.warning("job %s: storing its refusal failed; trying again in 5 s", job_id)
            raise self.retry(countdown=5, max_retries=None, exc=store_failed) from None
        rt.store.discard_queued(job_id)
        outcome("tandem.commit", "refused")
        return refused
    spec_json = job_spec.model_dump_json()
    rt.jobs.put(job_id, spec_json, job)  # the job's first steps find it, if they run here
    first = job.plan.opening(0)
    timeout = job_spec.timeout_s or rt.settings.job_timeout
    live_ttl = int(timeout + rt.settings.memory_ttl)
    first_look = min(rt.settings.lease_seconds, rt.settings.stall_seconds)
    indexes = rt.redis.pipeline(transaction=False)  # the live and recent indexes: one round trip
    rt.machine.index(job_id, time.time() + first_look, live_ttl, pipe=indexes)
    rt.store.remember(job_id, owner=job_spec.owner, pipe=indexes)
    indexes.execute()
    arm_webhooks(rt, job_id, job_spec)  # before the job can park or end (tandem.tasks.webhooks)
    messages, outbox_id = step_messages(job_id, first), uuid.uuid4().hex
    # The record, its first event and (where the broker is this Redis) the first step's message,
    # in one script call: the step is queued exactly when the job exists.
    gate = gate_of(rt)  # tenant caps: the job starts now, or waits for its turn (not wired then)
    verdict = gate.admit(job_id, job_spec) if gate is not None else STARTS[0]
    wired = wire(rt, messages, job_spec) if verdict in STARTS else None
    created = rt.machine.create(
        job_id,
        spec_json,
        job_spec.reasoner,
        (first.round, first.kind),
        [] if wired else messages,
        timeout=timeout,
        ttl_after=rt.settings.memory_ttl,
        outbox_id=outbox_id,
        started=rt.store.entry(JobStarted(spec=job_spec.public_dump())),
        maxlen=rt.store.stream.maxlen,
        wire=wired or (),
    )
    outcome("tandem.commit", "created" if created else "duplicate")
    if created and job_spec.thread_id:  # its thread's index (one key of the thread's own slot)
        index_job(rt.store, job_spec.thread_id, job_id, live_ttl)
    # A job created by this call sends the outbox it wrote (unless its message went with the
    # record); a duplicate intake message sends what the record's outbox still holds (nothing once
    # sent).
    if gate is not None and verdict not in STARTS:
        gate.hold(job_id, job_spec, created, verdict)  # held for its turn (tandem.tasks.tenants.gate)
    elif not (created and wired):
        send_outbox(rt, job_id, (outbox_id, messages) if created else None, spec=job_spec)
    if self.request.ignore_result:  # as ``send_intake`` sends it: Celery stores nothing now
        return None
    raise Ignore()  # a bare client's message: the result is stored when the job ends, not now
