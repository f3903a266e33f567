"""The Celery side: the app, the tasks (thin adapters over ``reasoner``) and the job state they share.

The names below load on first use (``import tandem.tasks`` imports neither Celery nor redis-py),
so a module of this package costs only its own imports. ``submit``, ``submit_async``, ``job`` and
``JobHandle`` are the client's (``tandem.client``), named here too as the design's contract has it.
"""

from __future__ import annotations

if __name__ != "tandem.tasks":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder tasks/, installed as the package 'tandem.tasks': "
        "import tandem.tasks instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from typing import TYPE_CHECKING

from tandem._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "JobEvent": "tandem.client.events",
    "JobHandle": "tandem.client.handle",
    "JobLostError": "tandem.tasks.errors",
    "JobResult": "tandem.tasks.spec",
    "JobSpec": "tandem.tasks.spec",
    "JobStatus": "tandem.tasks.spec",
    "JobTimeout": "tandem.tasks.errors",
    "RedisUnavailable": "tandem.tasks.errors",
    "job": "tandem.client.submission",
    "submit": "tandem.client.submission",
    "submit_async": "tandem.client.submission",
    "validate_spec": "tandem.tasks.spec",
}

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

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors only
    from tandem.client.events import JobEvent
    from tandem.client.handle import JobHandle
    from tandem.client.submission import job, submit, submit_async
    from tandem.tasks.errors import JobLostError, JobTimeout, RedisUnavailable
    from tandem.tasks.spec import JobResult, JobSpec, JobStatus, validate_spec

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
