"""``RecentJobs``: the indexes of recent jobs that job lists read (``JobStore.recent``, ``GET /v1/jobs``).

Two indexes, each a few sorted sets of job ids scored by the time the job was submitted, so no
single key is hot (``tandem.tasks.state.keys``):

- the shared one (``{prefix}:recent:<n>``, ``RECENT_SHARDS`` keys): every tenant's jobs, which an
  ``admin`` lists;
- each tenant's own (``{prefix}:recent-of:<tenant>:<n>``, ``TENANT_RECENT_SHARDS`` keys): a tenant's
  list reads it alone, so other tenants' newer jobs never crowd out its own.

Both are written at intake (``remember``, by ``submit`` and by the worker that creates the job) and
again at the job's end (``keep``), each time with the store's TTL (``TANDEM_MEMORY_TTL``) from
that moment: an index outlives every job in it (a job's keys expire that long after its end), and
the index of a tenant with no job left expires with its last one. Each is kept to about the newest
``RECENT_LIMIT`` jobs by rank (a trim on one call in ``RECENT_TRIM_EVERY``). An entry whose job's
record has expired is dropped when a list meets it (once it is older than ``PRUNE_GRACE``: an intake
indexes its job a moment before it writes the record), and the list reads on past it, so expired
jobs never shorten a page.

Jobs indexed before tenants had an index of their own (earlier versions) are in the shared index
only: a tenant's list finds them among the shared index's newest ``RECENT_LIMIT`` while its own
index holds fewer jobs than the page asks, and such a job joins its tenant's index when it ends.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from redis import Redis

from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.tasks.state.keys import (
    LEGACY_RECENT_KEY,
    RECENT_SHARDS,
    TENANT_RECENT_SHARDS,
    job_key,
    recent_shard_key,
    recent_shard_keys,
    tenant_recent_key,
    tenant_recent_keys,
)
from tandem.tasks.state.record import text as _text

RECENT_LIMIT = 1000
"""About how many jobs each index of recent jobs keeps."""
RECENT_PER_SHARD = 2 * RECENT_LIMIT // RECENT_SHARDS
"""How many jobs one shard of the shared index keeps: twice its share, so that the newest
``RECENT_LIMIT`` jobs are all kept however unevenly they fall into the shards."""
TENANT_RECENT_PER_SHARD = 2 * RECENT_LIMIT // TENANT_RECENT_SHARDS
"""How many jobs one shard of a tenant's index keeps (as ``RECENT_PER_SHARD``)."""
RECENT_TRIM_EVERY = 16
"""``remember`` trims the indexes on one call in this many (on average): between trims an index
may hold a few more than ``RECENT_LIMIT`` jobs."""
PRUNE_GRACE = 60.0
"""Seconds an entry must have been indexed before a list drops it for having no record."""
READS = 4
"""How many times one list reads on past entries it dropped, at most."""


Read = Callable[[str, Mapping[Any, Any]], Any]
"""A job's status from its id and its raw record (``None`` for no record)."""


class RecentJobs:
    """The indexes of recent jobs of one store (``redis``, ``prefix``), written with ``ttl``."""

    def __init__(self, redis: Redis, prefix: str, ttl: int) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl = ttl

    def remember(
        self, job_id: str, at: float | None = None, *, owner: str | None = None, pipe: Any = None
    ) -> None:
        """Index the job (at ``at``, now by default) in the shared index, and in tenant ``owner``'s
        when one is given; idempotent (an entry keeps its first time). Queued on ``pipe`` (not run)
        when one is given."""
        own = pipe is None
        pipe = self.redis.pipeline(transaction=False) if own else pipe
        at = at or time.time()
        trim = random.randrange(RECENT_TRIM_EVERY) == 0  # trimming on every call would double its cost
        for key, keep in self._indexes(job_id, owner):
            pipe.zadd(key, {job_id: at}, nx=True)
            if trim:
                pipe.zremrangebyrank(key, 0, -keep - 1)
            pipe.expire(key, self.ttl)
        if own:
            pipe.execute()

    def keep(self, job_id: str, owner: str) -> None:
        """At the end of tenant ``owner``'s job: keep its indexes ``ttl`` seconds from now (its keys
        live that long). A job indexed before tenants had an index of their own is put into its
        tenant's at the time the shared index gives it (a second round trip, for those jobs only)."""
        pipe = self.redis.pipeline(transaction=False)
        self.queue_keep(pipe, job_id, owner)
        self.kept(job_id, owner, pipe.execute()[-1])

    def queue_keep(self, pipe: Any, job_id: str, owner: str) -> None:
        """Queue ``keep``'s first round trip on ``pipe`` (three commands; the last one's reply goes
        to ``kept``): a job's end sends it with its other writes."""
        mine = tenant_recent_key(self.prefix, owner or DEFAULT_TENANT, job_id)
        pipe.expire(recent_shard_key(self.prefix, job_id), self.ttl)
        pipe.expire(mine, self.ttl)
        pipe.zscore(mine, job_id)

    def kept(self, job_id: str, owner: str, score: Any) -> None:
        """The rest of ``keep`` given the reply of ``queue_keep``'s last command: nothing when the
        job is in its tenant's index (every job indexed by this version), else it is put there."""
        if score is not None:
            return
        mine = tenant_recent_key(self.prefix, owner or DEFAULT_TENANT, job_id)
        at = self.redis.zscore(recent_shard_key(self.prefix, job_id), job_id)
        if at is not None:
            pipe = self.redis.pipeline(transaction=False)
            pipe.zadd(mine, {job_id: float(at)}, nx=True)
            pipe.expire(mine, self.ttl)
            pipe.execute()

    def forget(self, job_id: str, owner: str | None = None) -> None:
        """Take the job out of the indexes (a job the intake refused: it stores nothing)."""
        pipe = self.redis.pipeline(transaction=False)
        for key, _ in self._indexes(job_id, owner):
            pipe.zrem(key, job_id)
        pipe.execute()

    def newest(self, read: Read, count: int, owner: str | None = None) -> list[Any]:
        """The statuses (``read``) of the newest ``count`` jobs, newest first: every tenant's, or
        with ``owner`` that tenant's only, from its own index and, while that holds fewer, from
        the shared one (jobs indexed before tenants had their own index)."""
        count = max(count, 1)
        shared = [*recent_shard_keys(self.prefix), LEGACY_RECENT_KEY.format(prefix=self.prefix)]
        if owner is None:
            return self._read(shared, read, count)
        own = self._read(tenant_recent_keys(self.prefix, owner), read, count, owner)
        if len(own) >= count:
            return own
        seen = {status.job_id for status in own}  # those indexed before are older than these
        older = [
            s for s in self._read(shared, read, RECENT_LIMIT, owner, window=True) if s.job_id not in seen
        ]
        return [*own, *older][:count]

    def _indexes(self, job_id: str, owner: str | None) -> list[tuple[str, int]]:
        indexes = [(recent_shard_key(self.prefix, job_id), RECENT_PER_SHARD)]
        if owner is not None:
            indexes.append((tenant_recent_key(self.prefix, owner, job_id), TENANT_RECENT_PER_SHARD))
        return indexes

    def _read(
        self, shards: list[str], read: Read, count: int, owner: str | None = None, *, window: bool = False
    ) -> list[Any]:
        """The newest ``count`` statuses of ``shards`` (of tenant ``owner``'s jobs, when given),
        dropping the entries of expired jobs and reading on past them: each read looks at twice
        as many entries as the one before, ``READS`` reads at most (a list costs one read unless
        it meets expired jobs). ``window``: read the newest ``count`` entries only, never past them
        (the fallback to the shared index looks at its newest ``RECENT_LIMIT``, whoever's they are)."""
        found: list[Any] = []
        reach = count
        for _ in range(1 if window else READS):
            ids, shard_of, scores = self._ids(shards, reach)
            pipe = self.redis.pipeline(transaction=False)
            for job_id in ids:
                pipe.hgetall(job_key(self.prefix, job_id, "state"))
            statuses = [read(job_id, raw) for job_id, raw in zip(ids, pipe.execute(), strict=True)]
            found = [s for s in statuses if s is not None and (owner is None or s.owner == owner)]
            old = time.time() - PRUNE_GRACE
            gone = [j for j, s in zip(ids, statuses, strict=True) if s is None and scores[j] < old]
            if gone:
                pipe = self.redis.pipeline(transaction=False)
                for job_id in gone:
                    pipe.zrem(shard_of[job_id], job_id)
                pipe.execute()
            if len(found) >= count or not gone or window:
                break
            reach *= 2
        return found[:count]

    def _ids(self, shards: list[str], count: int) -> tuple[list[str], dict[str, str], dict[str, float]]:
        """The newest ``count`` ids of ``shards`` (each shard's newest ``count``, merged), the
        shard each was read from, and its time."""
        pipe = self.redis.pipeline(transaction=False)
        for key in shards:
            pipe.zrevrange(key, 0, count - 1, withscores=True)
        scores: dict[str, float] = {}
        shard_of: dict[str, str] = {}
        for key, entries in zip(shards, pipe.execute(), strict=True):
            for raw, score in entries:
                job_id = _text(raw)
                if job_id not in scores:
                    scores[job_id], shard_of[job_id] = float(score), key
        ids = sorted(scores, key=lambda job_id: scores[job_id], reverse=True)[:count]
        return ids, shard_of, scores


__all__ = [
    "PRUNE_GRACE",
    "RECENT_LIMIT",
    "RECENT_PER_SHARD",
    "RECENT_TRIM_EVERY",
    "TENANT_RECENT_PER_SHARD",
    "RecentJobs",
]
