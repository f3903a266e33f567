"""A client of tandem's HTTP API that needs only httpx and pydantic.

A service that submits jobs and reads their results through ``tandem api`` needs neither the
broker's nor Redis's credentials, nor Celery, LiteLLM or redis-py::

    from tandem import Client

    with Client("http://127.0.0.1:8000", token="...") as api:
        job = api.submit(goal="What is (17 * 23) + 4?", max_rounds=8)   # a RemoteJob
        for event in job.events():              # typed events; resumes by Last-Event-ID
            print(event.type)
        print(job.result().deliverable)         # or api.result(job.id)

``AsyncClient`` has the same methods, awaited, and its ``submit`` gives an ``AsyncRemoteJob``.
Both are drivers of one set of flows with no I/O (``tandem.client.http.flows``): the requests,
the reading of answers, the retries and the resuming of streams are written once. Errors are
``ClientError`` subclasses that mirror the API's status codes (``tandem.client.http.errors``).
"""

from tandem.client.http.aio import AsyncClient
from tandem.client.http.errors import (
    ClientError,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    PoolExhausted,
    RateLimited,
    ServerError,
    StalePauseError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from tandem.client.http.handles import AsyncRemoteJob, RemoteJob
from tandem.client.http.models import Job, JobOutcome, JobState, ThreadJob
from tandem.client.http.sync import Client

__all__ = [
    "AsyncClient",
    "AsyncRemoteJob",
    "Client",
    "ClientError",
    "Conflict",
    "ConnectionFailed",
    "InvalidRequest",
    "Job",
    "JobOutcome",
    "JobState",
    "NotFound",
    "PoolExhausted",
    "RateLimited",
    "RemoteJob",
    "ServerError",
    "StalePauseError",
    "ThreadJob",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
]
