"""The client side: what a service that submits jobs and follows them imports, and nothing of a worker.

Two ways in, one room:

- ``tandem.client.http``: ``Client`` and ``AsyncClient``, over ``tandem api``'s HTTP; they need only
  httpx and pydantic (no broker or Redis credentials, no Celery).
- ``tandem.client.submission``: ``submit``, ``submit_async`` and ``job``, through the broker and Redis
  directly (Celery's client and redis-py); each gives a ``JobHandle`` (``tandem.client.handle``).

Names load on first use, so ``import tandem.client`` imports neither httpx nor Celery.
"""

from __future__ import annotations

if __name__ != "tandem.client":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder client/, installed as the package 'tandem.client': "
        "import tandem.client instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from typing import TYPE_CHECKING

from tandem._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AsyncClient": "tandem.client.http",
    "Client": "tandem.client.http",
    "ClientError": "tandem.client.http",
    "JobHandle": "tandem.client.handle",
    "job": "tandem.client.submission",
    "submit": "tandem.client.submission",
    "submit_async": "tandem.client.submission",
}

__all__ = ["AsyncClient", "Client", "ClientError", "JobHandle", "job", "submit", "submit_async"]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors only
    from tandem.client.handle import JobHandle
    from tandem.client.http import AsyncClient, Client, ClientError
    from tandem.client.submission import job, submit, submit_async

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
