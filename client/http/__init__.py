"""A client of tandem's HTTP API that needs only httpx and pydantic.

A service that submits jobs and reads their results through ``tandem api`` needs neither the
broker's nor Redis's credentials, nor Celery, LiteLLM or redis-py::

    from tandem.client.http import Client

    with Client("http://127.0.0.1:8000", token="...") as api:
        job_id = api.submit(goal="What is (17 * 23) + 4?", max_rounds=8)
        for event in api.events(job_id):        # resumes by Last-Event-ID when the link drops
            print(event.type)
        print(api.result(job_id).deliverable)

``AsyncClient`` has the same methods, awaited. Errors are ``ClientError`` subclasses that mirror
the API's status codes (see ``tandem.client.http.errors``).
"""

from tandem.client.http.aio import AsyncClient
from tandem.client.http.errors import (
    ClientError,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    StalePauseError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from tandem.client.http.models import Event, Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.sync import Client

__all__ = [
    "AsyncClient",
    "Client",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "Event",
    "InvalidRequest",
    "Job",
    "JobOutcome",
    "JobState",
    "NotFound",
    "RateLimited",
    "ServerError",
    "StalePauseError",
    "ThreadJob",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
]
