"""Submitting jobs and following them: ``submit(spec) -> JobHandle``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from celery import Celery

from tandem.tasks.errors import JobTimeout, UnknownJobError
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus, validate_spec
from tandem.tasks.store import JobStore
from tandem.toolkit.redaction import redact


class JobHandle:
    """A submitted job: its ``id`` (the Celery id of ``tandem.infer``), status, events and result."""

    def __init__(self, job_id: str, store: JobStore, app: Celery, *, submitted: bool = False) -> None:
        self.id = job_id
        self._store = store
        self._app = app
        self._submitted = submitted

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def status(self) -> JobStatus:
        """Where the job stands: ``queued`` until a worker takes it (for a job this handle submitted),
        ``failed`` with the reason for a spec the worker refused; ``UnknownJobError`` for an id
        that no store, result or submit knows."""
        stored = self._store.status(self.id)
        if stored is not None:
            return stored
        refused = self._celery_result()
        if refused is not None:
            return JobStatus(job_id=self.id, state=refused.status, error=refused.error, step="intake")
        if self._submitted:
            return JobStatus(job_id=self.id, state="queued")
        raise UnknownJobError(
            f"no job {self.id!r} is known: it was never submitted, or it ended more than "
            "TANDEM_RESULT_EXPIRES seconds ago"
        )

    def _celery_result(self) -> JobResult | None:
        """The job's result as Celery's backend holds it (how a refused spec is answered)."""
        celery_result = self._app.AsyncResult(self.id)
        value = celery_result.result if celery_result.ready() else None
        if isinstance(value, dict) and "status" in value:
            return JobResult.model_validate(value)
        return None

    def result(self, timeout: float | None = None, poll: float = 0.05) -> JobResult:
        """Wait for the final result; ``JobTimeout`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._store.result(self.id) or self._celery_result()
            if found is not None:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(
                    f"job {self.id} has not ended after {timeout:g} s (state: {self._state()})"
                )
            time.sleep(poll)

    def _state(self) -> str:
        try:
            return self.status().state
        except UnknownJobError:
            return "unknown"

    def events(self, *, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        """The job's live events (round_started, model_reply, tool_call, tool_result, final)."""
        return self._store.events(self.id, timeout=timeout)

    def cancel(self) -> None:
        """Stop the job at its next step.

        Steps still queued find the flag when a worker takes them and end at once, without
        calling a model or a tool; the job's result is ``cancelled``. (Queued steps are not
        revoked by id: every step of a job shares the job id, and a revoked chord part would
        turn the job's Celery result into a chord error instead of the cancelled JobResult.)
        """
        self._store.request_cancel(self.id)
        if self._state() == "queued":
            # No worker has started the job: it ends here, and its intake message is revoked.
            self._app.control.revoke(self.id)
            result = self._store.finish(
                JobResult(job_id=self.id, status="cancelled", error="cancelled before it started"),
                ttl=int(self._app.conf.result_expires or 86400),
            )
            self._app.backend.store_result(self.id, result.model_dump(mode="json"), "SUCCESS")


def submit(
    spec: JobSpec | dict[str, Any], *, app: Celery | None = None, store: JobStore | None = None
) -> JobHandle:
    """Validate ``spec`` and enqueue ``tandem.infer``; an invalid spec raises ``JobSpecError``
    naming the field (``SpecLimitError`` naming the limit), and nothing is enqueued.

    With ``TANDEM_SECRETS_KEY`` the spec's ``secrets`` are sealed here, so the broker message never
    holds them in clear; the message's display form (Flower, worker logs) shows them as ``***``.
    """
    from tandem.tasks.runtime import get_runtime

    rt = get_runtime()
    job_spec = validate_spec(spec, rt.settings.limits)
    if job_spec.secrets and rt.settings.secrets_key:
        job_spec = rt.secret_box.seal_spec(job_spec)
    app = app or _default_app()
    store = store or rt.store
    public = job_spec.public_dump()
    result = app.send_task(
        "tandem.infer",
        kwargs={"spec": job_spec.model_dump(mode="json")},
        kwargsrepr=_shown({"spec": public}),
    )
    return JobHandle(result.id, store, app, submitted=True)


def _shown(value: Any, limit: int = 1024) -> str:
    """A short display form of a message's arguments (what Flower and the worker log show)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def job(job_id: str) -> JobHandle:
    """A handle on an existing job by id."""
    from tandem.tasks.runtime import get_runtime

    rt = get_runtime()
    handle = JobHandle(job_id, rt.store, _default_app())
    if rt.store.spec(job_id) is None and rt.store.status(job_id) is None and handle._celery_result() is None:
        raise UnknownJobError(f"no job {job_id!r} is known to {redact(rt.settings.redis_url)}")
    return handle


def _default_app() -> Celery:
    from tandem.tasks.app import app

    return app


__all__ = ["FINAL_STATES", "JobHandle", "JobTimeout", "job", "submit"]
