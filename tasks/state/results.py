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

A client never writes the result in the script (``ResultDelivery.for_client``): where a client ends
a job (the cancel of a job no worker has started) it leaves the mark, tries to store the result
once, and leaves it to the workers when its Redis user may not write Celery's results (the client
user of docs/security.md may only read them: a client could otherwise overwrite any job's result).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
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
    connection pool, such as a cluster client; for a Sentinel client, its Sentinels, service and
    database: ``tandem.broker_config.sentinel.sentinel_address``)."""
    from tandem.broker_config.sentinel_clients import sentinel_address

    if (found := sentinel_address(client)) is not None:
        return found
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
    by_client: bool = False
    """Delivered by a client's process, whose Redis user may be refused the write (then the
    workers deliver it): ``for_client``."""

    @classmethod
    def for_client(cls, app: Celery) -> ResultDelivery:
        """The delivery of a job a client ends: through the ``deliver`` mark, never in the script
        (see the module docstring)."""
        return cls(app, in_script=False, by_client=True)

    @classmethod
    def for_store(cls, app: Celery, store: JobStore) -> ResultDelivery:
        """The delivery for ``app``'s result backend and the job store ``store``: in the script
        only when the backend is the store's very Redis database (never for a Redis Cluster store,
        whose job keys live apart from the backend's: the ``deliver`` mark then)."""
        from tandem.broker_config.job_redis import is_cluster

        if is_cluster(store.redis):
            return cls(app, in_script=False)
        backend = app.conf.result_backend
        if isinstance(backend, str) and backend.startswith("sentinel://"):
            # Celery's Sentinel backend: the same Sentinels, service and database as the store's.
            return cls(app, in_script=client_address(app.backend.client) == client_address(store.redis))
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


END_HOOKS: list[Callable[[str, str], None]] = []
"""Called with the job id and owner after a job's first end is stored (the worker's tenant gate)."""


def end_job(
    store: JobStore,
    result: JobResult,
    ttl: int,
    *,
    claim: Claim | None = None,
    delivery: ResultDelivery | None = None,
    parts: Sequence[str] | None = None,
) -> tuple[bool, JobResult | None]:
    """End the job with ``result`` (its secrets redacted already) in one script: the result, the
    ``final`` event and the Celery result (see the module docstring), the job's keys expiring
    ``ttl`` seconds from now. With ``claim`` only that step may end the job.

    Returns whether this call stored the first result, and the stored result (``None`` when the
    claim was lost and nobody ended the job). The job leaves the live index once its Celery result
    is out (at once, unless it must still be delivered). ``parts``: the job's keys whose TTL the
    end sets (``JobMachine.finish``; all by default)."""
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
        parts=parts,
    )
    if not first:  # another end came first: the reconciler unindexes the job once it is out
        return False, store.result(job_id)
    for hook in END_HOOKS:  # a tenant's slot (tandem.tasks.tenants.gate): never fails the end
        try:
            hook(job_id, result.owner)
        except Exception as exc:
            log.warning("job %s: an end hook failed (%s); a worker's sweep catches up", job_id, exc)
    mark = write.mark if write is not None else ""
    out = not (mark and delivery is not None)  # its Celery result is out: it leaves the live index now
    _after_end(store, result, unindex=out)
    if not out and delivery is not None and deliver(store, delivery, job_id, mark):
        store.machine.unindex(job_id)
    return True, result


_UNREAD: Any = object()
"""A reply not read yet (``_keep``, ``_count_end``): the function reads it itself."""


def _after_end(store: JobStore, result: JobResult, *, unindex: bool) -> None:
    """The reads and writes after a job's first end, in one round trip: its record's
    ``created_at`` (for ``_count_end``), its recent-jobs indexes kept as long as its keys
    (``RecentJobs.keep``: a listing must never fail an end) and, with ``unindex``, its exit from
    the live index (whose failure raises, as the end's other writes do)."""
    job_id = result.job_id
    pipe = store.redis.pipeline(transaction=False)
    pipe.hget(store.key(job_id, "state"), "created_at")
    store.recents.queue_keep(pipe, job_id, result.owner)
    if unindex:
        store.machine.unindex(job_id, pipe)
    try:
        replies = pipe.execute(raise_on_error=False)
    except Exception as exc:  # no reply at all: each write as it was, on its own
        log.warning("job %s: its end's last writes failed (%s); trying them one by one", job_id, exc)
        _count_end(store, job_id, result.status)
        _keep(store, job_id, result.owner)
        if unindex:
            store.machine.unindex(job_id)
        return
    _count_end(store, job_id, result.status, replies[0])
    _keep(store, job_id, result.owner, replies[3])
    if unindex and isinstance(replies[4], Exception):
        raise replies[4]


def _keep(store: JobStore, job_id: str, owner: str, score: Any = _UNREAD) -> None:
    """The job stays listed while its keys last: ``RecentJobs.kept`` given the reply of its queued
    ``zscore`` (not given: the whole ``RecentJobs.keep``); a listing must never fail an end."""
    try:
        if score is _UNREAD:
            store.recents.keep(job_id, owner)
        elif isinstance(score, Exception):
            raise score
        else:
            store.recents.kept(job_id, owner, score)
    except Exception as exc:
        log.warning("job %s: keeping it in the job lists failed (%s); it ended all the same", job_id, exc)


def _count_end(store: JobStore, job_id: str, outcome: str, created: Any = _UNREAD) -> None:
    """Count the job's end in ``tandem_jobs_ended_total`` and its duration in ``tandem_job_seconds``
    (from its record's ``created_at``, read here unless given; never raises: a metric must not
    fail a job's end). Imported here: a job also ends in a client's process (a cancel), whose
    core install has no prometheus_client, and whose metrics no one scrapes."""
    try:
        from tandem.tasks import metrics

        metrics.JOBS_ENDED.labels(outcome).inc()
        if created is _UNREAD or isinstance(created, Exception):
            created = store.redis.hget(store.key(job_id, "state"), "created_at")
        if created:
            metrics.JOB_SECONDS.labels(outcome).observe(max(0.0, time.time() - float(created)))
    except Exception:
        log.debug("could not count the end of job %s", job_id, exc_info=True)


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis's ``NOPERM`` (the user may not run the command or touch the key)."""
    from redis.exceptions import NoPermissionError

    return isinstance(exc, NoPermissionError)


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
        if delivery.by_client and _refused(exc):
            log.info(
                "job %s: this client's Redis user may not write Celery's results (%s); a worker stores it",
                job_id,
                exc,
            )
            return False
        log.warning(
            "job %s: storing its Celery result failed (%s: %s); the reconciler tries again",
            job_id,
            type(exc).__name__,
            exc,
        )
        return False
    store.machine.delivered(job_id, mark)
    return True
