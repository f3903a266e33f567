"""``TenantQueue``: which job may start now, by tenant caps and a weighted fair share (Redis).

Failure model first. Every decision is one Lua script on Redis's clock over keys that share the
hash tag ``{fair}`` (one slot: the fair pick reads every tenant), under ``<prefix>:tenants:``, which the
client's Redis user may read and not write (docs/security.md): a client cannot reset its tenant's
count or free its own slots. A job counts as running from
its admission until its end releases it, or until its expiry (its deadline) if no end is seen (a
worker killed at the wrong moment): a lost release delays the next admission, it never loses a
slot for good. An admitted job that no worker starts (killed between the pick and the start) stays
in the ``admitted`` set, and a worker's sweep starts it again (starting twice is a no-op).

Keys (``<prefix>:tenants:{fair}:`` then): ``running:<tenant>`` (sorted set: job -> expiry),
``waiting:<tenant>`` (sorted set: job -> priority and arrival), ``waiting_tenants`` (set),
``running`` (the fleet's, sorted set), ``parked`` (hash: job -> seconds it may count as running once
admitted), ``admitted`` (sorted set: job -> admission time), ``seen`` (set: the tenants that asked to start
a job in the last ``KEY_TTL``). Every key has a TTL, renewed by writes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis import Redis

from tandem.broker_config.tenant_settings import TenantSettings
from tandem.tasks.state.scripts import lua


def tenant_base(prefix: str) -> str:
    """The start of every tenant key (``<prefix>:tenants:{fair}:``)."""
    return f"{prefix}:tenants:{{fair}}:"


KEY_TTL = 2 * 86400
"""Seconds the tenant keys outlive their last write (job expiries are bounded by their deadlines)."""


def spawned_key(prefix: str) -> str:
    """The children workers started (a sorted set of job ids scored by when they stop counting):
    a tenant key, which the client ACL user may read but not write, so a client cannot make its
    job pass for a child by writing a children index (``TenantGate._spawned``)."""
    return f"{tenant_base(prefix)}spawned"


def mark_spawned(redis: Redis, prefix: str, job_id: str, until: float) -> None:
    """Note that a worker started ``job_id`` as a child, until Unix time ``until``."""
    key, now = spawned_key(prefix), time.time()
    pipe = redis.pipeline(transaction=False)
    pipe.zadd(key, {job_id: until})
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.expire(key, max(KEY_TTL, int(until - now) + 60))
    pipe.execute()


def is_spawned(redis: Redis, prefix: str, job_id: str) -> bool:
    """Whether a worker started ``job_id`` as a child (``mark_spawned``), still counting."""
    score = redis.zscore(spawned_key(prefix), job_id)
    return score is not None and float(score) > time.time()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class TenantLoad:
    """A tenant's jobs now: running (admitted, not ended) and waiting for their turn."""

    running: int
    waiting: int


class TenantQueue:
    """Admission of job starts by tenant (see the module docstring)."""

    def __init__(self, redis: Redis, prefix: str, tenants: TenantSettings) -> None:
        self.redis = redis
        self.base = tenant_base(prefix)
        self.tenants = tenants
        self._admit = redis.register_script(lua("tenant_admit"))
        self._pick = redis.register_script(lua("tenant_pick"))

    def key(self, part: str) -> str:
        """The key of ``part`` (``running:<tenant>``, ``waiting:<tenant>``, ``parked``...)."""
        return self.base + part

    def admit(self, job_id: str, tenant: str, priority: int, expiry: float) -> str:
        """Ask to start ``job_id``: ``admitted`` (it counts as running from now, for at most
        ``expiry`` seconds unless released), ``running`` (it was), or ``waiting`` (queued for its turn,
        most urgent and oldest first within its tenant); ``waiting+room`` when it queued behind its
        own tenant's waiting jobs while a slot was free (run ``pick``)."""
        policy = self.tenants.policy(tenant)
        keys = [self.key(f"running:{tenant}"), self.key(f"waiting:{tenant}"), self.key("waiting_tenants")]
        keys += [self.key("running"), self.key("parked"), self.key("seen")]
        args = [job_id, tenant, policy.max_running_jobs or 0, self.tenants.max_running_jobs or 0]
        reply = self._admit(keys=keys, args=[*args, f"{expiry:.3f}", priority, KEY_TTL])
        return _text(reply)

    def pick(self, ended: tuple[str, str] | None = None, most: int = 64) -> list[str]:
        """Release ``ended`` (job id, tenant) if given, then admit waiting jobs into the free slots,
        at most ``most``, weighted fair share between tenants; returns them (the caller starts them)."""
        import json

        job, tenant = ended or ("", "")
        keys = [self.key("waiting_tenants"), self.key("running"), self.key("parked"), self.key("admitted")]
        shares = json.dumps(self.tenants.shares())
        fleet = self.tenants.max_running_jobs or 0
        reply = self._pick(keys=keys, args=[self.base, shares, fleet, most, job, tenant, KEY_TTL])
        return [_text(j) for j in reply]

    def is_waiting(self, job_id: str, tenant: str) -> bool:
        """Whether ``job_id`` is in ``tenant``'s waiting list."""
        return self.redis.zscore(self.key(f"waiting:{tenant}"), job_id) is not None

    def started(self, job_id: str) -> None:
        """The admitted job is known started: no sweep starts it again."""
        self.redis.zrem(self.key("admitted"), job_id)

    def admitted_before(self, at: float) -> list[str]:
        """Jobs admitted before ``at`` (Unix time) not yet known started."""
        return [_text(j) for j in self.redis.zrangebyscore(self.key("admitted"), "-inf", at)]

    def known_tenants(self) -> list[str]:
        """Tenants configured, with waiting jobs, or with running ones."""
        names = set(self.tenants.tenants)
        names.update(_text(t) for t in self.redis.smembers(self.key("seen")))  # no SCAN: a client may not
        return sorted(names)

    def running_jobs(self, tenant: str) -> list[str]:
        """The jobs counted as running for ``tenant``."""
        return [_text(j) for j in self.redis.zrange(self.key(f"running:{tenant}"), 0, -1)]

    def load(self, tenants: Iterable[str]) -> dict[str, TenantLoad]:
        """Running and waiting jobs of each of ``tenants`` (expired entries are not counted)."""
        import time

        names = list(tenants)
        pipe = self.redis.pipeline(transaction=False)
        now = time.time()
        for name in names:
            pipe.zcount(self.key(f"running:{name}"), now, "+inf")
            pipe.zcard(self.key(f"waiting:{name}"))
        counts = pipe.execute() if names else []
        return {n: TenantLoad(int(counts[2 * i]), int(counts[2 * i + 1])) for i, n in enumerate(names)}


__all__ = ["KEY_TTL", "TenantLoad", "TenantQueue", "tenant_base"]
