"""The guard around every step: claim it, commit what it did, park it for a back-off, end the job.

A step claims its record (nothing happens if the job is elsewhere, ended, or a live worker holds
the step; a job whose formats this worker does not read has its message handed back to the queue,
``tandem.tasks.steps.hand_back``), and commits by one fenced transition: its memory writes are
stored and the record moves to the next step only if its claim still stands; then its events go
out and the next step is sent.
A step that failed transiently (a model host's 429/5xx/time-out, Redis or broker errors) is parked
in ``waiting`` and sent again after a back-off (the shared ``RetryPolicy``), until the job's
deadline; any other failure ends the job ``failed``. ``finish`` ends a job (the first result stored
wins); a lost claim ends nothing.
"""

from __future__ import annotations

import contextvars
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from celery.exceptions import Ignore
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.reasoner.errors import ReasonerError, TransientModelError
from tandem.reasoner.loop.step import Step, StepKind
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.models.retry_policy import RetryPolicy
from tandem.reasoner.task import OutcomeStatus
from tandem.tasks import tracing
from tandem.tasks.control.parking import announce
from tandem.tasks.errors import JobError
from tandem.tasks.events import EventHooks
from tandem.tasks.job_events import Waiting
from tandem.tasks.runtime import Runtime, get_runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.claims import Claim, ClaimRefused, Message, Park
from tandem.tasks.state.pending import DeferredHooks, PendingMemory
from tandem.tasks.state.record import EndStatus, end_status
from tandem.tasks.state.results import end_job as end_job_durably
from tandem.tasks.state.views import ViewAsk
from tandem.tasks.steps.context import enter_job_scope
from tandem.tasks.steps.dispatch import send_outbox, wire
from tandem.tasks.steps.hand_back import hand_back_step
from tandem.tasks.steps.messages import step_messages
from tandem.tasks.tracing import step_span
from tandem.tasks.webhooks import delivery as webhooks
from tandem.toolkit.errors import ToolkitError
from tandem.toolkit.redaction import redact, redact_known

log = logging.getLogger("tandem.tasks")
T = TypeVar("T")

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (TransientModelError, RedisError, OperationalError)
"""Failures a step waits out (rescheduled with back-off) instead of failing the job."""

STEP_BACKOFF = RetryPolicy(max_retries=0, backoff_base=1.0, backoff_max=60.0)
"""The back-off of a step parked after a transient failure: before its ``n + 1``-th try it waits up
to ``min(60, 2**n)`` seconds (full jitter), or the host's ``Retry-After`` (in full, however long:
a parked step holds no thread). The job's deadline bounds the tries, not ``max_retries``."""


def retrying(rt: Runtime, action: Callable[[], T]) -> T:
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
    status: EndStatus,
    error: str | Callable[[], str] | None = None,
    *,
    claim: Claim | None = None,
    spec: JobSpec | None = None,
    memory: ReasonerMemory | None = None,
) -> dict[str, Any]:
    """End the job with ``status`` (the first result stored wins) and return the stored result.

    With ``claim`` only the claimed step may end the job (a lost claim ends nothing); without, the
    job ends whatever step it is at (cancel, deadline, give-up). ``spec``: the job's, when the
    caller has it (else it is read); ``memory``: the job's messages, when the caller holds them
    all (the step that just committed the job's last messages; else they are read). ``error``
    may be a callable, asked for the reason last, just before the result is stored (a deadline's
    reason names the job's last error as of then, not as of the reconciler's first read).
    """
    # In a context of its own: the job's secret scope entered here ends with it (the reconciler's
    # thread ends many jobs, and must not mask one job's secrets in the next one's records).
    return contextvars.copy_context().run(_finish, job_id, status, error, claim, spec, memory)


def _finish(
    job_id: str,
    status: EndStatus,
    error: str | Callable[[], str] | None,
    claim: Claim | None,
    spec: JobSpec | None,
    memory: ReasonerMemory | None,
) -> dict[str, Any]:
    rt = get_runtime()
    spec = spec or rt.store.spec(job_id)
    if spec is not None:
        enter_job_scope(rt, job_id, spec)  # the result masks the job's own secrets
    memory = memory if memory is not None else rt.store.memory(job_id)
    plan = rt.plan(spec) if spec is not None else None
    outcome_status: OutcomeStatus = status if status in ("completed", "truncated") else "failed"
    late, given = (error, None) if callable(error) else (None, error)
    if plan is not None:
        outcome = plan.outcome(memory, outcome_status, given)
        deliverable, rounds, usage = outcome.deliverable, outcome.rounds, outcome.usage
        given = given or outcome.error
    else:
        outcome, deliverable, rounds, usage = None, "", 0, None
    from tandem.tasks.control.children import on_job_ended, own_children

    children = own_children(rt, job_id, spec.owner if spec is not None else DEFAULT_TENANT)
    if late is not None:  # read last: a failed attempt noted while the end was being built counts
        given = late()
        outcome = outcome.model_copy(update={"error": given}) if outcome is not None else None
    error = given if status != "completed" else None
    result = JobResult(
        job_id=job_id,
        status=status,
        owner=spec.owner if spec is not None else DEFAULT_TENANT,
        deliverable=redact_known(deliverable) if status in ("completed", "truncated") else "",
        rounds=rounds,
        error=redact(error) if error else None,
        **({"usage": usage} if usage is not None else {}),
        children=children,
    )
    ttl = rt.settings.memory_ttl
    first, stored = end_job_durably(rt.store, result, ttl, claim=claim, delivery=rt.delivery)
    tracing.outcome("tandem.commit", f"ended {status}" if stored is not None else "lost")
    if stored is None:  # a lost claim, and nobody ended the job: nothing to report
        raise Ignore()
    if first and outcome is not None:
        EventHooks(rt.store, job_id).finished(outcome)
    if first:  # its parent hears of it, its children still running are cancelled
        on_job_ended(rt, job_id, spec, stored, end_job)
    if first and spec is not None and spec.webhooks:
        webhooks.notify(rt, job_id, spec)  # its ``final`` deliveries
    return stored.model_dump(mode="json")


def end_job(job_id: str, reason: str, detail: str = "") -> dict[str, Any] | None:
    """End a job the reconciler or a refused claim gave up on: ``deadline``, ``give-up`` or
    ``cancel``."""
    rt = get_runtime()
    if reason == "cancel":
        return finish(job_id, "cancelled")
    record = rt.machine.job(job_id)
    where = record.where if record is not None else "step ? of round ?"
    if reason == "deadline":
        spec = rt.store.spec(job_id)
        timeout = (spec.timeout_s if spec else None) or rt.settings.job_timeout

        def message() -> str:  # the last error as the job ends (a step may note one meanwhile)
            now = rt.machine.job(job_id)
            last = (now.last_error if now is not None else "") or "none"
            return f"the job's deadline passed (timeout_s={timeout:g}) at {where}; last error: {last}"

        return finish(job_id, "failed", message)
    given_up = (
        f"{where}{' call ' + detail if detail else ''} lost its worker more than "
        f"{rt.settings.max_lease_expiries} times (lease expiries); giving up"
    )
    return finish(job_id, "failed", given_up)


def refused(job_id: str, refusal: ClaimRefused) -> None:
    """Leave a step whose claim was refused (ending the job if its deadline passed or its worker
    was lost too often)."""
    tracing.outcome("tandem.claim", refusal.reason)
    if refusal.reason in ("deadline", "give-up"):
        end_job(job_id, refusal.reason)
    raise Ignore()


def describe_failure(exc: BaseException) -> str:
    """The error a step's failure leaves in the job's result (redacted; an unexpected one logged)."""
    if not isinstance(exc, ReasonerError | JobError | ToolkitError):
        log.exception("step failed unexpectedly")
    return redact(f"{type(exc).__name__}: {exc}")


def backoff(exc: BaseException, retries: int) -> float:
    """Seconds a step waits after a transient failure ``exc``, parked ``retries`` times before."""
    retry_after = getattr(exc, "retry_after", None)
    asked = float(retry_after) if isinstance(retry_after, int | float) and retry_after > 0 else None
    wait = STEP_BACKOFF.delay(retries, asked)
    if wait is None:  # a Retry-After over backoff_max: waited in full (a parked step holds no thread)
        return asked or 0.0
    return wait


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
    slot registers for its wake-up then, ``tandem.tasks.hosts.waiting``): ``False`` leaves the
    copy in the outbox."""
    step = Step(claim.round, claim.kind)
    countdown = round(delay, 3)
    outbox = [
        Message(task=m["task"], args=m["args"], countdown=countdown)
        for m in step_messages(claim.job_id, step)
    ]
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
    tracing.parked(reason, until, error, host)
    log.warning(
        "job %s: %s; %s of round %d runs again in %.1f s", claim.job_id, error, claim.kind, claim.round, delay
    )
    if callable(send_now):
        send_now = send_now()
    if send_now:  # else a capacity waiter's wake-up (or the reconciler) sends it
        send_outbox(rt, claim.job_id)
    raise Ignore()


def step_failed(rt: Runtime, claim: Claim, exc: BaseException) -> dict[str, Any] | None:
    """Reschedule the claimed step after a transient failure, or end the job ``failed``."""
    if isinstance(exc, TRANSIENT_ERRORS):
        reason = "the model host" if isinstance(exc, TransientModelError) else "Redis or the broker"
        record = rt.machine.job(claim.job_id)
        retries = record.retries if record is not None else 0
        return reschedule(rt, claim, backoff(exc, retries), reason, f"{type(exc).__name__}: {exc}")
    return finish(claim.job_id, "failed", describe_failure(exc), claim=claim)


# -- claiming and committing -----------------------------------------------------------------


def claim_step(rt: Runtime, job_id: str, round_no: int, kind: StepKind, view: ViewAsk | None = None) -> Claim:
    """Claim step ``kind`` of ``round_no`` for this worker (``Ignore`` when it is not to be run);
    with ``view``, read what the step works with in the same call (``Claim.view``)."""
    settings = rt.settings
    got = rt.machine.claim(job_id, round_no, kind, settings.lease_seconds, settings.max_lease_expiries, view)
    if isinstance(got, ClaimRefused):
        if got.versions is not None:  # not this worker's formats: back to the queue, untouched
            hand_back_step(job_id, round_no, kind, got, rt.machine.versions)
        refused(job_id, got)
    assert isinstance(got, Claim)
    tracing.claimed(got.attempt, got.epoch)
    return got


def claim_call(rt: Runtime, job_id: str, round_no: int, index: int, view: ViewAsk | None = None) -> Claim:
    """Claim tool call ``index`` of ``round_no`` (its attempt recorded; ``Ignore`` when refused);
    with ``view``, read what the call works with in the same call (``Claim.view``)."""
    got = rt.machine.claim_call(
        job_id, round_no, index, rt.settings.lease_seconds, rt.settings.max_lease_expiries, view
    )
    if isinstance(got, ClaimRefused):
        if got.versions is not None:  # not this worker's formats: back to the queue, untouched
            hand_back_step(job_id, round_no, "tools", got, rt.machine.versions, index)
        if got.reason == "no-call":  # no message tandem sends names a call its round lacks
            log.warning(
                "message refused, nothing done: tandem.run_tool: argument 'index' = %d: round %d of "
                "job %s has no such call",
                index,
                round_no,
                job_id,
            )
        refused(job_id, got)
    assert isinstance(got, Claim)
    tracing.claimed(got.attempt, got.epoch)
    return got


def commit(
    rt: Runtime,
    claim: Claim,
    nxt: Step,
    memory: PendingMemory,
    hooks: DeferredHooks,
    spec: JobSpec,
    park: Park | None = None,
) -> None:
    """Store the step's writes and its events and move to ``nxt`` (parked for approval with
    ``park``: its held calls are not sent); then send ``nxt``."""
    tx = uuid.uuid4().hex  # also the id of the outbox the transition writes
    free = None if park is None else [i for i in range(1, nxt.calls + 1) if i not in park.held]
    messages = step_messages(claim.job_id, nxt, free)
    # The step's events are appended by the commit's script: in the stream exactly when the step
    # is stored (never for a step whose claim was lost), in the same round trip.
    events = hooks.drain()
    entries = [rt.store.entry(event) for event in events or ()]
    maxlen = rt.store.stream.maxlen
    # Where the broker is this Redis the commit also queues the next step (no outbox to send); the
    # finalize message stays in the outbox, for the reconciler, while this worker ends the job.
    wired = None if nxt.kind == "finalize" else wire(rt, messages, spec)
    moved = retrying(
        rt,
        lambda: rt.machine.transition(
            claim,
            (nxt.round, nxt.kind, nxt.calls, nxt.status),
            [] if wired else messages,
            memory.writes(),
            tx=tx,
            park=park,
            events=entries,
            maxlen=maxlen,
            wire=wired or (),
        ),
    )
    tracing.outcome("tandem.commit", "committed" if moved else "lost")
    if not moved:
        log.warning(
            "job %s: %s of round %d lost its claim (epoch %d); its work is dropped",
            claim.job_id,
            claim.kind,
            claim.round,
            claim.epoch,
        )
        raise Ignore()
    if events is None:
        hooks.flush()
    if park is not None:
        tracing.parked("approval", park.until)
        announce(rt.store, claim.job_id, park)
        if spec.webhooks:
            webhooks.notify(rt, claim.job_id, spec)  # its ``waiting_for_person`` deliveries
    if nxt.kind == "finalize":
        # Ending the job needs no other worker: it ends here, at once (one hop less per job). The
        # finalize message stays in the outbox until the job has ended, for the reconciler.
        # The committed step holds the job's whole memory: the outcome is read from it.
        finalize_step(claim.job_id, nxt.round, status=end_status(nxt.status), spec=spec, memory=memory)
        return
    if wired is None:
        send_outbox(rt, claim.job_id, (tx, messages), spec)
    # Returned, not raised: Celery formats a traceback for every ``Ignore`` (a step task stores
    # no result, so returning costs nothing).


def finalize_step(
    job_id: str,
    round_no: int,
    *,
    status: EndStatus | None = None,
    spec: JobSpec | None = None,
    memory: ReasonerMemory | None = None,
) -> dict[str, Any]:
    """The ``finalize`` step: woken by ``tandem.finalize``, or run at once by the step that moved
    the job there (which passes the ``status`` it wrote in the record, the job's ``spec`` and
    the ``memory`` it committed)."""
    with step_span(job_id, round_no, "finalize"):
        return _finalize_step(job_id, round_no, status, spec, memory)


def _finalize_step(
    job_id: str,
    round_no: int,
    status: EndStatus | None,
    spec: JobSpec | None,
    memory: ReasonerMemory | None,
) -> dict[str, Any]:
    rt = get_runtime()
    claim = claim_step(rt, job_id, round_no, "finalize")
    if status is None:
        record = rt.machine.job(job_id)
        status = end_status(record.status if record is not None else "")
    return finish(job_id, status, claim=claim, spec=spec, memory=memory)
