"""What the submitter needs of its process, built once from the settings: the job store over a
Redis client, and the box that seals a spec's secrets; tracing starts as the ``OTEL_*`` variables
ask (docs/tracing.md), so a submitted job's trace opens at ``submit``. Nothing of a worker (no
model, toolkit, host capacity or loop plan) is built or imported.

In a worker process, where a task submits a job (a follow-up), the worker's runtime already holds
the same three: it is used instead, so that the process keeps one Redis pool.
"""

from __future__ import annotations

import sys
import threading
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from tandem.broker_config.job_redis import job_store_client, redis_options
from tandem.tasks.sealing import SecretBox
from tandem.tasks.state.store import JobStore

if TYPE_CHECKING:
    from redis import Redis

    from tandem.broker_config.settings import Settings

CLIENT_POOL = 16
"""Redis connections a submitter's process may open (``TANDEM_REDIS_MAX_CONNECTIONS`` overrides):
as many as a worker's runtime opens for its default four step threads."""


class Connection(Protocol):
    """What ``submit`` and ``job`` read: the settings, the job store and the secret box."""

    @property
    def settings(self) -> Settings:
        """The process's settings (``TANDEM_*``)."""
        ...

    @property
    def store(self) -> JobStore:
        """The job store."""
        ...

    @property
    def secret_box(self) -> SecretBox:
        """Seals ``JobSpec.secrets`` with ``TANDEM_SECRETS_KEY``."""
        ...


class ClientConnection:
    """The submitter's ``Connection``, built lazily from ``settings``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def redis(self) -> Redis:
        """A client of ``TANDEM_REDIS_URL`` (a cluster's for ``redis+cluster://``), over a blocking
        pool of ``CLIENT_POOL`` connections, with tandem's timeouts and keepalive."""
        size = self.settings.redis_max_connections or CLIENT_POOL
        return job_store_client(
            self.settings,
            max_connections=size,
            pool_timeout=self.settings.redis_pool_timeout,
            **redis_options(self.settings),
        )

    @cached_property
    def store(self) -> JobStore:
        """The job store."""
        return JobStore.from_settings(self.redis, self.settings)

    @cached_property
    def secret_box(self) -> SecretBox:
        """Seals ``JobSpec.secrets`` with ``TANDEM_SECRETS_KEY``."""
        return SecretBox(self.settings.secrets_key)


_connection: ClientConnection | None = None
_lock = threading.Lock()


def connection() -> Connection:
    """This process's connection: the worker's runtime if this process built one, else a
    ``ClientConnection`` of the app's settings (``tandem.tasks.app.settings``), built once."""
    global _connection
    worker_module = sys.modules.get("tandem.tasks.runtime")  # looked up, never imported here
    worker: Connection | None = getattr(worker_module, "_runtime", None)
    if worker is not None:
        return worker
    with _lock:
        if _connection is None:
            from tandem.broker_config.trace_settings import TraceSettings
            from tandem.reasoner import tracing
            from tandem.tasks.app import settings

            _connection = ClientConnection(settings)
            tracing.configure(TraceSettings.from_env())
        return _connection


__all__ = ["CLIENT_POOL", "ClientConnection", "Connection", "connection"]
