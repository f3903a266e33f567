"""Submitting jobs and following them: ``submit(spec) -> JobHandle``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from celery import Celery

from tandem.tasks.errors import JobTimeout, UnknownJobError
from tandem.tasks.spec import FINAL_STATES, JobResult, JobSpec, JobStatus, validate_spec
from tandem.tasks.store import JobStore


class JobHandle:
    """A submitted job: its ``id`` (the Celery id of ``tandem.infer``), status, events and result."""

    def __init__(self, job_id: str, store: JobStore, app: Celery) -> None:
        self.id = job_id
        self._store = store
        self._app = app

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def status(self) -> JobStatus:
        """Where the job stands (``queued`` until a worker takes it)."""
        return self._store.status(self.id) or JobStatus(job_id=self.id, state="queued")

    def result(self, timeout: float | None = None, poll: float = 0.05) -> JobResult:
        """Wait for the final result; ``JobTimeout`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self._store.result(self.id)
            if found is not None:
                return found
            celery_result = self._app.AsyncResult(self.id)
            if (
                celery_result.ready()
                and isinstance(celery_result.result, dict)
                and "status" in celery_result.result
            ):
                return JobResult.model_validate(celery_result.result)
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(
                    f"job {self.id} has not ended after {timeout:g} s (state: {self.status().state})"
                )
            time.sleep(poll)

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
        status = self.status()
        if status.state == "queued":
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
    naming the field, and nothing is enqueued."""
    job_spec = validate_spec(spec)
    if app is None or store is None:
        from tandem.tasks.runtime import get_runtime

        app = app or _default_app()
        store = store or get_runtime().store
    result = app.send_task("tandem.infer", kwargs={"spec": job_spec.model_dump(mode="json")})
    return JobHandle(result.id, store, app)


def job(job_id: str) -> JobHandle:
    """A handle on an existing job by id."""
    from tandem.tasks.runtime import get_runtime

    rt = get_runtime()
    if rt.store.spec(job_id) is None and rt.store.status(job_id) is None:
        raise UnknownJobError(f"no job {job_id!r} is known to {rt.settings.redis_url}")
    return JobHandle(job_id, rt.store, _default_app())


def _default_app() -> Celery:
    from tandem.tasks.app import app

    return app


__all__ = ["FINAL_STATES", "JobHandle", "JobTimeout", "job", "submit"]
