"""The Celery side: the app, the tasks (thin adapters over ``reasoner``), and the client API."""

from tandem.tasks.client import JobHandle, JobTimeout, job, submit, submit_async
from tandem.tasks.errors import JobLostError, RedisUnavailable
from tandem.tasks.job_events import JobEvent
from tandem.tasks.spec import JobResult, JobSpec, JobStatus, validate_spec

__all__ = [
    "JobEvent",
    "JobHandle",
    "JobLostError",
    "JobResult",
    "JobSpec",
    "JobStatus",
    "JobTimeout",
    "RedisUnavailable",
    "job",
    "submit",
    "submit_async",
    "validate_spec",
]
