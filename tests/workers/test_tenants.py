"""``tandem tenants``: the table and the JSON of each tenant's policy, jobs and usage (fakeredis)."""

from __future__ import annotations

from datetime import UTC, datetime

import fakeredis

from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
from tandem.tasks.tenants.queue import TenantQueue
from tandem.tasks.tenants.usage import TenantUsage
from tandem.workers.tenants import format_tenants, tenant_rows

NOON = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


def test_rows_show_policy_jobs_and_usage_against_the_quota() -> None:
    redis = fakeredis.FakeRedis()
    tenants = TenantSettings(
        tenants={"acme": TenantPolicy(max_running_jobs=1, weight=3, max_tokens=1000, max_cost_usd=2.0)},
        default=TenantPolicy(max_running_jobs=5),
    )
    queue = TenantQueue(redis, "t", tenants)
    queue.admit("j1", "acme", 5, 600)
    queue.admit("j2", "acme", 5, 600)
    queue.admit("k1", "other", 5, 600)
    TenantUsage(redis, "t").add("acme", 400, 0.25, now=NOON)
    rows = {r["tenant"]: r for r in tenant_rows(redis, "t", tenants, now=NOON)}
    assert set(rows) == {"acme", "other"}
    acme = rows["acme"]
    assert (acme["running"], acme["waiting"], acme["weight"], acme["max_running_jobs"]) == (1, 1, 3, 1)
    assert (acme["tokens_today"], acme["cost_usd_today"], acme["max_tokens"]) == (400, 0.25, 1000)
    assert acme["quota_resets_at"] == "2026-11-30T00:00:00Z"
    assert rows["other"]["max_running_jobs"] == 5 and rows["other"]["running"] == 1
    table = format_tenants(list(rows.values()), 40, tenants.default.public())
    assert "tenants not named (default): max_running_jobs 5, weight 1" in table
    assert "400 / 1000" in table and "0.2500 / 2.0000" in table and "fleet cap" in table and "40" in table


def test_no_tenant_says_how_to_set_them() -> None:
    assert "TANDEM_TENANTS" in format_tenants([], None)


def test_the_tenant_gauges_come_from_the_rows() -> None:
    from tandem.tasks.metrics import TenantCollector

    rows = [{"tenant": "acme", "running": 2, "waiting": 7, "tokens_today": 400, "cost_usd_today": 0.25}]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in TenantCollector(lambda: rows).collect()
        for s in family.samples
    }
    assert samples[("tandem_tenant_jobs", (("state", "waiting"), ("tenant", "acme")))] == 7
    assert samples[("tandem_tenant_jobs", (("state", "running"), ("tenant", "acme")))] == 2
    assert samples[("tandem_tenant_tokens_today", (("tenant", "acme"),))] == 400
    assert samples[("tandem_tenant_cost_usd_today", (("tenant", "acme"),))] == 0.25


def test_no_tenant_gauge_sample_when_redis_cannot_be_read() -> None:
    from tandem.tasks.metrics import TenantCollector

    def broken() -> list[dict[str, object]]:
        raise ConnectionError("redis is down")

    assert [s for f in TenantCollector(broken).collect() for s in f.samples] == []
