"""The Celery result of ``tandem.infer``: a job's ``JobResult`` where bare clients read it.

A service that sent ``tandem.infer`` by name (a plain Celery client, celery-node, Flower's API)
reads the job's end from Celery's result backend, under the job id. That result is part of the
job's durable end, like the ``final`` event:

- when the result backend is the job store's Redis (the default deployment), the script that ends
  the job writes it too, in Celery's format, and publishes it to the clients waiting on it: there is
  no moment at which the job has ended and its result is not there;
- otherwise the job's record keeps a ``deliver`` mark and the job stays in the reconciler's index
  until the result is stored: the step that ended the job tries at once, and every worker's
  reconciler tries again (``tandem.tasks.state.reconciler``) until the backend takes it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from celery import Celery

from tandem.tasks.job_events import Final
from tandem.tasks.spec import JobResult
from tandem.tasks.state.claims import CeleryWrite, Claim, FinalEntry

if TYPE_CHECKING:
    from tandem.tasks.state.store import JobStore

log = logging.getLogger("tandem.tasks")

QUICK_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
"""Celery's Redis backend retries a failed write for some 20 s by default: the reconciler's
attempts (every few seconds, from every worker) need not."""


def redis_address(url: str) -> tuple[Any, ...]:
    """What names one Redis database in ``url``: transport, host, port (or socket path), database,
    user. Two URLs with the same address reach the same keys (Celery's ``redis+socket://`` and
    redis-py's ``unix://`` name a socket the same way)."""
    parts = urlsplit(url)
    scheme = {"redis+socket": "unix"}.get(parts.scheme, parts.scheme)
    query = parse_qs(parts.query)
    if scheme == "unix":
        db = (query.get("db") or query.get("virtual_host") or ["0"])[0]
        return ("unix", unquote(parts.path), int(db or 0), parts.username or "")
    db = parts.path.strip("/") or (query.get("db") or ["0"])[0]
    host = (parts.hostname or "localhost").lower()
    return (scheme, host, parts.port or 6379, int(db or 0), parts.username or "")


def client_address(client: Any) -> tuple[Any, ...] | None:
    """The ``redis_address`` a redis-py client connects to (``None`` for one without a single
    connection pool, such as a cluster client)."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    if kwargs.get("path"):
        return ("unix", kwargs["path"], int(kwargs.get("db") or 0), kwargs.get("username") or "")
    tls = "SSL" in getattr(pool, "connection_class", type(None)).__name__
    host = str(kwargs.get("host") or "localhost").lower()
    return (
        "rediss" if tls else "redis",
        host,
        int(kwargs.get("port") or 6379),
        int(kwargs.get("db") or 0),
        kwargs.get("username") or "",
    )


def celery_meta(job_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The result of task ``job_id`` in Celery's format (what its backend stores and publishes)."""
    return {
        "status": "SUCCESS",
        "result": payload,
        "traceback": None,
        "children": [],
        "date_done": datetime.now(UTC).isoformat(),
        "task_id": job_id,
    }


@dataclass(frozen=True)
class ResultDelivery:
    """How a job's Celery result reaches the backend: ``in_script`` (the backend is the store's
    Redis: the script that ends the job writes it) or through the ``deliver`` mark."""

    app: Celery
    in_script: bool

    @classmethod
    def for_store(cls, app: Celery, store: JobStore) -> ResultDelivery:
        """The delivery for ``app``'s result backend and the job store ``store``: in the script
        only when the backend is the store's very Redis database (never for a Redis Cluster store,
        whose job keys live apart from the backend's: the ``deliver`` mark then)."""
        from tandem.broker_config.job_redis import is_cluster

        if is_cluster(store.redis):
            return cls(app, in_script=False)
        backend = app.conf.result_backend
        same = isinstance(backend, str) and redis_address(backend) == client_address(store.redis)
        return cls(app, in_script=same)

    def key(self, job_id: str) -> str:
        """The backend's key (and channel) of the job's result."""
        key = self.app.backend.get_key_for_task(job_id)
        return key.decode() if isinstance(key, bytes) else str(key)

    def value(self, job_id: str, payload: dict[str, Any]) -> str:
        """The stored (and published) form of the job's result."""
        encoded = self.app.backend.encode(celery_meta(job_id, payload))
        return encoded.decode() if isinstance(encoded, bytes) else str(encoded)

    @property
    def expires(self) -> int:
        """Seconds the backend keeps a result (``TANDEM_RESULT_EXPIRES``)."""
        return int(self.app.backend.expires or 0)

    def write(self, job_id: str, payload: dict[str, Any]) -> CeleryWrite:
        """What the finish script does with the job's Celery result (see ``JobMachine.finish``)."""
        if self.in_script:
            return CeleryWrite(key=self.key(job_id), value=self.value(job_id, payload), expires=self.expires)
        return CeleryWrite(mark=uuid.uuid4().hex)

    def deliver(self, job_id: str, payload: dict[str, Any]) -> None:
        """Store (and publish) the job's result in the backend; raises if it cannot, after one
        quick retry (the reconciler tries again later)."""
        self.app.backend.set(self.key(job_id), self.value(job_id, payload), **QUICK_RETRY)


def end_job(
    store: JobStore,
    result: JobResult,
    ttl: int,
    *,
    claim: Claim | None = None,
    delivery: ResultDelivery | None = None,
) -> tuple[bool, JobResult | None]:
    """End the job with ``result`` (its secrets redacted already) in one script: the result, the
    ``final`` event and the Celery result (see the module docstring), the job's keys expiring
    ``ttl`` seconds from now. With ``claim`` only that step may end the job.

    Returns whether this call stored the first result, and the stored result (``None`` when the
    claim was lost and nobody ended the job). The job leaves the live index once its Celery result
    is out (at once, unless it must still be delivered)."""
    job_id = result.job_id
    payload = result.model_dump(mode="json")
    entry = store.entry(Final.of(result))
    write = delivery.write(job_id, payload) if delivery is not None else None
    first = store.machine.finish(
        job_id,
        result.model_dump_json(),
        result.status,
        result.error or "",
        ttl,
        claim,
        final=FinalEntry(entry["data"], entry["at"]),
        celery=write,
    )
    if not first:  # another end came first: the reconciler unindexes the job once it is out
        return False, store.result(job_id)
    _count_end(store, job_id, result.status)
    mark = write.mark if write is not None else ""
    if mark and delivery is not None and not deliver(store, delivery, job_id, mark):
        return True, result
    store.machine.unindex(job_id)
    return True, result


def _count_end(store: JobStore, job_id: str, outcome: str) -> None:
    """Count the job's end in ``tandem_jobs_ended_total`` and its duration in ``tandem_job_seconds``
    (from its record's ``created_at``; never raises: a metric must not fail a job's end). Imported
    here: a job also ends in a client's process (a cancel), whose core install has no
    prometheus_client, and whose metrics no one scrapes."""
    try:
        from tandem.tasks import metrics

        metrics.JOBS_ENDED.labels(outcome).inc()
        created = store.redis.hget(store.key(job_id, "state"), "created_at")
        if created:
            metrics.JOB_SECONDS.labels(outcome).observe(max(0.0, time.time() - float(created)))
    except Exception:
        log.debug("could not count the end of job %s", job_id, exc_info=True)


def deliver(store: JobStore, delivery: ResultDelivery, job_id: str, mark: str) -> bool:
    """Store the Celery result of an ended job whose record holds the ``deliver`` ``mark`` and
    clear the mark; ``False`` (logged; the mark stays for the reconciler) if the backend refused."""
    raw = store.redis.get(store.key(job_id, "result"))
    if raw is None:  # expired with the job: nothing left to deliver
        store.machine.delivered(job_id, mark)
        return True
    try:
        delivery.deliver(job_id, json.loads(raw))
    except Exception as exc:
        log.warning(
            "job %s: storing its Celery result failed (%s: %s); the reconciler tries again",
            job_id,
            type(exc).__name__,
            exc,
        )
        return False
    store.machine.delivered(job_id, mark)
    return True
