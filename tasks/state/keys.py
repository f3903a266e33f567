"""Every Redis key of tandem's job state, in one place.

A job's keys are ``{prefix}:{<job_id>}:{part}``: one hash tag per job, so each script of the state
machine touches one Redis Cluster slot. The reconciler's index of live jobs is ``LIVE_SHARDS`` sorted
sets ``{prefix}:live:{shard}``, and the index of recent jobs ``RECENT_SHARDS`` sorted sets
``{prefix}:recent:{shard}``, so no single key is hot (on a cluster the shards spread over the nodes).
"""

from __future__ import annotations

import zlib

JOB_PARTS = (
    "state",
    "spec",
    "memory",
    "tools",
    "calls",
    "events",
    "result",
    "cancel",
    "approval",
    "intake",
    "artifacts",
)
"""A job's keys, in the order the state machine's scripts take them (``state`` first). The keys a
script takes after them (a question, a Celery result, broker lists) follow at ``len(JOB_PARTS) + 1``
on: the scripts name them so (``KEYS[12]``)."""

CLIENT_PARTS = ("state", "intake", "cancel", "events", "result", "decisions", "messages")
"""The parts of a job's keys a client writes, and the only ones the client Redis user of
docs/security.md may write (it reads the others): the record and intake at ``submit``, the cancel
flag, the end of a job cancelled before any worker took it (its record, ``final`` event and
result), and the answer of a decision or message it withdrew."""

LIVE_SHARDS = 16
"""The live-job index is this many sorted sets, so no single key is hot."""


JOB_KEY = "{prefix}:{{{job_id}}}:{part}"
"""The Redis key of ``part`` (one of ``JOB_PARTS``) of a job (a ``str.format`` template)."""

LIVE_SHARD_KEY = "{prefix}:live:{shard}"
"""The key of one shard of the live-job index (a ``str.format`` template)."""
WAKE_KEY = "{prefix}:live:wake"
"""A list a cancel pushes to, so that a reconciler sweeps at once (``Reconciler.pause``)."""


RECENT_SHARDS = 16
"""The index of recent jobs (``JobStore.recent``) is this many sorted sets."""

RECENT_SHARD_KEY = "{prefix}:recent:{shard}"
"""The key of one shard of the index of recent jobs (a ``str.format`` template)."""

WEBHOOK_SHARD_KEY = "{prefix}:webhooks:{shard}"
"""The key of one shard of the index of jobs with webhook deliveries to watch (``LIVE_SHARDS`` of
them; ``tandem.tasks.webhooks.outbox``)."""

TENANT_RECENT_SHARDS = 4
"""Each tenant's index of recent jobs (``JobStore.recent(owner=...)``) is this many sorted sets."""

TENANT_RECENT_KEY = "{prefix}:recent-of:{owner}:{shard}"
"""The key of one shard of a tenant's index of recent jobs (a ``str.format`` template)."""

LEGACY_RECENT_KEY = "{prefix}:recent-jobs"
"""The unsharded index of recent jobs of earlier versions: read (never written) until it expires."""


def pause_id(job_id: str, round_no: int, seq: int) -> str:
    """The id of a job's pause for a person: job, round, step (``tools``) and the pause's number
    in the job (its record's ``pause_seq`` when it paused, from 1)."""
    return f"{job_id}:{round_no}:tools:{seq}"


def job_key(prefix: str, job_id: str, part: str) -> str:
    """The Redis key of ``part`` (one of ``JOB_PARTS``) of a job."""
    return JOB_KEY.format(prefix=prefix, job_id=job_id, part=part)


def job_keys(prefix: str, job_id: str) -> list[str]:
    """Every key of a job, in ``JOB_PARTS`` order."""
    return [JOB_KEY.format(prefix=prefix, job_id=job_id, part=part) for part in JOB_PARTS]


def live_shard_key(prefix: str, shard: int) -> str:
    """The key of one shard of the live-job index."""
    return LIVE_SHARD_KEY.format(prefix=prefix, shard=shard)


def live_shard_of(job_id: str) -> int:
    """The shard of the live-job index a job is in."""
    return zlib.crc32(job_id.encode()) % LIVE_SHARDS


def recent_shard_key(prefix: str, job_id: str) -> str:
    """The key of the shard of the index of recent jobs ``job_id`` is in."""
    return RECENT_SHARD_KEY.format(prefix=prefix, shard=zlib.crc32(job_id.encode()) % RECENT_SHARDS)


def recent_shard_keys(prefix: str) -> list[str]:
    """Every shard of the index of recent jobs."""
    return [RECENT_SHARD_KEY.format(prefix=prefix, shard=shard) for shard in range(RECENT_SHARDS)]


def webhook_shard_key(prefix: str, shard: int) -> str:
    """The key of one shard of the webhook index."""
    return WEBHOOK_SHARD_KEY.format(prefix=prefix, shard=shard)


def tenant_recent_key(prefix: str, owner: str, job_id: str) -> str:
    """The key of the shard of tenant ``owner``'s index of recent jobs ``job_id`` is in."""
    shard = zlib.crc32(job_id.encode()) % TENANT_RECENT_SHARDS
    return TENANT_RECENT_KEY.format(prefix=prefix, owner=owner, shard=shard)


def tenant_recent_keys(prefix: str, owner: str) -> list[str]:
    """Every shard of tenant ``owner``'s index of recent jobs."""
    return [
        TENANT_RECENT_KEY.format(prefix=prefix, owner=owner, shard=s) for s in range(TENANT_RECENT_SHARDS)
    ]


def messages_key(prefix: str, job_id: str) -> str:
    """A job's hash of person's messages (``tandem.message``): the counter ``seq`` and the answer
    kept under each idempotency key (``key:<idempotency key>``); under the job's hash tag, with
    the job's TTL."""
    return JOB_KEY.format(prefix=prefix, job_id=job_id, part="messages")


def thread_key(prefix: str, thread_id: str) -> str:
    """A thread's index (``tandem.tasks.control.threads``): a sorted set of its jobs' ids by the time
    they joined, under the thread's own hash tag, with a TTL."""
    return JOB_KEY.format(prefix=prefix, job_id=thread_id, part="thread")
