"""Submitting jobs through the broker: ``submit(spec) -> JobHandle``, from asyncio code
``await submit_async(spec)``, and ``job(job_id)`` for a handle on a job submitted before."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from tandem.broker_config.acl_refusals import ACL_DOCS, refused_error
from tandem.client.connection import connection
from tandem.client.handle import JobHandle
from tandem.client.outages import restart_note, server_info
from tandem.reasoner import tracing
from tandem.tasks.errors import UnknownJobError
from tandem.tasks.intake_message import send_intake
from tandem.tasks.spec import JobSpec, validate_spec
from tandem.tasks.state.async_store import AsyncRedisFactory
from tandem.tasks.state.store import JobStore
from tandem.tasks.tracing import job_span
from tandem.tasks.webhooks.targets import check_webhooks
from tandem.toolkit.redaction import redact

log = logging.getLogger("tandem.client")


def submit(
    spec: JobSpec | dict[str, Any],
    *,
    app: Celery | None = None,
    store: JobStore | None = None,
    job_id: str | None = None,
) -> JobHandle:
    """Validate ``spec`` and enqueue ``tandem.infer``; an invalid spec raises ``JobSpecError``
    naming the field (``SpecLimitError`` naming the limit), and nothing is enqueued.

    Once the job's record is stored the job is accepted: if the broker then fails to take its
    message, the handle is returned all the same (a warning is logged) and the reconciler sends
    the message once the broker answers, so a caller never submits the same job twice.
    ``job_id``: the new job's id (a fresh one by default; a follow-up derives its own).

    With ``TANDEM_SECRETS_KEY`` the spec's ``secrets`` are sealed here, so the broker message never
    holds them in clear; the message's display form (Flower, worker logs) shows them as ``***``.
    """
    rt = connection()
    job_spec = validate_spec(spec, rt.settings.limits)
    check_webhooks(job_spec.webhooks, rt.settings.webhooks)
    if job_spec.secrets and rt.settings.secrets_key:
        job_spec = rt.secret_box.seal_spec(job_spec)
    app = app or _default_app()
    store = store or rt.store
    job_id = job_id or str(uuid.uuid4())
    if tracing.STATE.on:  # the job's trace starts here, under the caller's current span
        job_spec = job_spec.model_copy(
            update={"trace_context": job_span(job_id, {"tandem.reasoner": job_spec.reasoner})}
        )
    wire = job_spec.model_dump(mode="json")
    # Known (``queued``, listed among recent jobs) before any worker can see it: a follower that
    # starts reading its events at once does not take it for an unknown job. The spec is kept
    # until a worker starts the job, and the job is in the reconciler's index: a lost intake
    # message is sent again after TANDEM_STALL_SECONDS. The index entry is written first: a
    # failover loses the last writes only (replication is one ordered stream), so a record that
    # survived has its entry, and is never left queued with nobody to send it again.
    timeout = job_spec.timeout_s or rt.settings.job_timeout
    store.machine.index(job_id, time.time() + rt.settings.stall_seconds, int(timeout + store.ttl))
    store.mark_queued(job_id, job_spec.reasoner, intake=json.dumps(wire), owner=job_spec.owner)
    try:
        send_intake(app, job_id, wire)
    except (OperationalError, RedisConnectionError, RedisTimeoutError, OSError) as exc:
        # The job is stored and indexed: the reconciler sends its intake message once the broker
        # answers. Raising here would make a caller submit it again, and run it twice.
        refused = refused_error(exc)
        log.warning(
            "job %s is stored as queued, but its message could not be sent now (%s: %s); it is "
            "sent again within TANDEM_STALL_SECONDS (%gs) of the broker answering%s",
            job_id,
            type(exc).__name__,
            exc,
            rt.settings.stall_seconds,
            f" (by a worker: {ACL_DOCS} gives clients the intake queue)" if refused is not None else "",
        )
    handle = JobHandle(job_id, store, app, submitted=True)
    handle.owner = job_spec.owner  # its decisions, answers, resume and fork ask as the job's tenant
    return handle


async def submit_async(
    spec: JobSpec | dict[str, Any],
    *,
    app: Celery | None = None,
    store: JobStore | None = None,
    aredis: AsyncRedisFactory | None = None,
) -> JobHandle:
    """``submit`` for asyncio code: the spec is validated at once (``JobSpecError``, nothing
    enqueued) and the message is sent from a thread, as Celery's client is not asyncio."""
    job_spec = validate_spec(spec)
    handle = await asyncio.to_thread(submit, job_spec, app=app, store=store)
    handle._aredis = aredis
    return handle


def job(job_id: str) -> JobHandle:
    """A handle on an existing job by id; ``UnknownJobError`` when no store or result knows it
    (noting a recent restart of a Redis without persistence, which erases every job)."""
    rt = connection()
    handle = JobHandle(job_id, rt.store, _default_app())

    def stored() -> bool:
        return rt.store.spec(job_id) is not None or rt.store.status(job_id) is not None

    reach = handle._reconnect()
    if reach.call(stored):
        handle._saw()
    elif reach.call(handle._celery_result) is None:
        note = restart_note(server_info(rt.store.redis), rt.store.ttl)
        raise UnknownJobError(f"no job {job_id!r} is known to {redact(rt.settings.redis_url)}{note}")
    return handle


def _default_app() -> Celery:
    from tandem.tasks.app import app

    return app


__all__ = ["job", "submit", "submit_async"]
