"""``tenant_rows``: each tenant's policy, running and waiting jobs and today's usage, as Redis holds
them now (read by ``tandem tenants`` and the workers' ``/metrics``)."""

from __future__ import annotations

import time
from typing import Any

from tandem.broker_config.tenant_settings import TenantSettings
from tandem.tasks.tenants.queue import TenantQueue
from tandem.tasks.tenants.usage import TenantUsage, next_reset


def tenant_rows(
    redis: Any, prefix: str, tenants: TenantSettings, now: float | None = None
) -> list[dict[str, Any]]:
    """One row per tenant configured or with jobs: policy, running, waiting, today's tokens and cost."""
    now = time.time() if now is None else now
    queue, usage = TenantQueue(redis, prefix, tenants), TenantUsage(redis, prefix)
    names = queue.known_tenants()
    loads = queue.load(names)
    rows = []
    for name in names:
        policy = tenants.policy(name)
        tokens, cost = usage.today(name, now)
        rows.append(
            {
                "tenant": name,
                **policy.public(),
                "running": loads[name].running,
                "waiting": loads[name].waiting,
                "tokens_today": tokens,
                "cost_usd_today": round(cost, 6),
                "quota_resets_at": next_reset(now).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    return rows


__all__ = ["tenant_rows"]
