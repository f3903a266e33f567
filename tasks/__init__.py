"""The Celery side: the app, the tasks (thin adapters over ``reasoner``), and the client API."""

from tandem.tasks.client import JobHandle, JobTimeout, job, submit
from tandem.tasks.spec import JobResult, JobSpec, JobStatus, validate_spec

__all__ = ["JobHandle", "JobResult", "JobSpec", "JobStatus", "JobTimeout", "job", "submit", "validate_spec"]
