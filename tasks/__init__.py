"""The Celery side: the app, the tasks (thin adapters over ``reasoner``), and the client API."""

if __name__ != "tandem.tasks":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder tasks/, installed as the package 'tandem.tasks': "
        "import tandem.tasks instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

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
