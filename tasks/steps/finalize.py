"""``tandem.finalize``: the end of a job, with the status its record holds (usually run at once by
the step that moved the job there: ``tandem.tasks.steps.guard.finalize_step``)."""

from __future__ import annotations

from typing import Any

from celery import Task as CeleryTask

from tandem.tasks.app import app
from tandem.tasks.steps.guard import finalize_step


@app.task(name="tandem.finalize", bind=True)
def finalize(self: CeleryTask, job_id: str, round_no: int, *_: Any) -> dict[str, Any]:
    """Store and return the final ``JobResult`` with the status the job's record holds."""
    return finalize_step(job_id, round_no)
