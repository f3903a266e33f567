"""``TenantUsage``: the model tokens and cost of each tenant's jobs per UTC day, and the quota check.

Counted where a model step stores its reply (``tandem.tasks.steps.model``), one ``HINCRBY`` and
one ``HINCRBYFLOAT`` on ``<prefix>:tenants:{fair}:usage:<tenant>:<YYYY-MM-DD>`` (the day in UTC of the
worker's clock), which lives two days. Intake refuses a new job of a tenant whose day's count has
reached ``max_tokens`` or ``max_cost_usd``; jobs running already go on (their calls still count). A
new day starts at midnight UTC with a new key: the quota resets then.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from redis import Redis

from tandem.broker_config.tenant_settings import TenantPolicy
from tandem.tasks.tenants.queue import tenant_base

USAGE_TTL = 2 * 86400 + 3600
"""Seconds a day's counters live (the day and the next, with an hour to spare)."""


def utc_day(now: float) -> str:
    """The UTC day of Unix time ``now`` (``YYYY-MM-DD``)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d")


def next_reset(now: float) -> datetime:
    """The next midnight UTC after ``now``: when the day's quotas reset."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


class TenantUsage:
    """Per tenant and UTC day: tokens and USD of its jobs' model calls."""

    def __init__(self, redis: Redis, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix

    def key(self, tenant: str, day: str) -> str:
        """The key of ``tenant``'s counters on ``day``."""
        return f"{tenant_base(self.prefix)}usage:{tenant}:{day}"

    def add(self, tenant: str, tokens: int, cost_usd: float, now: float | None = None) -> None:
        """Count a model call's ``tokens`` and ``cost_usd`` for ``tenant`` on today's UTC day."""
        if tokens <= 0 and cost_usd <= 0:
            return
        key = self.key(tenant, utc_day(time.time() if now is None else now))
        pipe = self.redis.pipeline(transaction=False)
        if tokens > 0:
            pipe.hincrby(key, "tokens", int(tokens))
        if cost_usd > 0:
            pipe.hincrbyfloat(key, "cost_usd", float(cost_usd))
        pipe.expire(key, USAGE_TTL)
        pipe.execute()

    def today(self, tenant: str, now: float | None = None) -> tuple[int, float]:
        """``tenant``'s tokens and USD on the UTC day of ``now``."""
        key = self.key(tenant, utc_day(time.time() if now is None else now))
        raw = self.redis.hmget(key, "tokens", "cost_usd")
        return int(raw[0] or 0), float(raw[1] or 0.0)

    def refusal(self, tenant: str, policy: TenantPolicy, now: float | None = None) -> str | None:
        """Why a new job of ``tenant`` is refused today (a daily quota is used up), or ``None``."""
        if policy.max_tokens is None and policy.max_cost_usd is None:
            return None
        now = time.time() if now is None else now
        tokens, cost = self.today(tenant, now)
        reset = next_reset(now)
        left = int(reset.timestamp() - now)
        when = f"the quota resets at {reset:%Y-%m-%dT%H:%M:%SZ} (midnight UTC"
        when += f", in {left // 3600}h{left % 3600 // 60:02d}m)"
        if policy.max_tokens is not None and tokens >= policy.max_tokens:
            return (
                f"tenant {tenant!r} has used its daily quota max_tokens={policy.max_tokens}: {tokens} tokens "
                f"today (UTC); {when}"
            )
        if policy.max_cost_usd is not None and cost >= policy.max_cost_usd:
            return (
                f"tenant {tenant!r} has used its daily quota max_cost_usd={policy.max_cost_usd:g}: "
                f"${cost:.4f} today (UTC); {when}"
            )
        return None


__all__ = ["USAGE_TTL", "TenantUsage", "next_reset", "utc_day"]
