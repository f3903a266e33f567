"""``TenantQueue`` and ``TenantUsage`` on fakeredis (with Lua): caps, the weighted fair pick, quotas."""

from __future__ import annotations

from datetime import UTC, datetime

import fakeredis
import pytest

from tandem.broker_config.tenant_settings import TenantPolicy, TenantSettings
from tandem.tasks.tenants.queue import TenantQueue
from tandem.tasks.tenants.usage import TenantUsage, next_reset, utc_day


def queue(tenants: TenantSettings) -> TenantQueue:
    return TenantQueue(fakeredis.FakeRedis(), "t", tenants)


def test_a_tenant_at_its_cap_waits_and_its_job_starts_when_one_ends() -> None:
    q = queue(TenantSettings(default=TenantPolicy(max_running_jobs=2)))
    assert [q.admit(f"a{i}", "a", 5, 600) for i in range(3)] == ["admitted", "admitted", "waiting"]
    assert q.admit("a0", "a", 5, 600) == "running"  # a copy of the message: nothing new
    assert q.admit("a2", "a", 5, 600) == "waiting"
    assert q.pick() == []  # no slot free
    assert q.pick(("a0", "a")) == ["a2"]
    assert q.load(["a"])["a"].running == 2 and q.load(["a"])["a"].waiting == 0


def test_a_burst_of_one_tenant_does_not_sit_ahead_of_another_tenants_job() -> None:
    q = queue(TenantSettings(max_running_jobs=2))
    assert q.admit("a0", "a", 5, 600) == "admitted"
    assert q.admit("a1", "a", 5, 600) == "admitted"
    for i in range(2, 50):
        assert q.admit(f"a{i}", "a", 5, 600) == "waiting"
    assert q.admit("b0", "b", 5, 600) == "waiting"  # the fleet is full
    assert q.pick(("a0", "a")) == ["b0"]  # a holds 1 slot, b none: b's job goes first
    assert q.pick(("a1", "a")) == ["a2"]  # then a (a 1 running, b 1: tie, a's head is older)


def test_free_slots_follow_the_weights() -> None:
    tenants = TenantSettings(
        tenants={"a": TenantPolicy(weight=3.0), "b": TenantPolicy(weight=1.0)}, max_running_jobs=8
    )
    q = queue(tenants)
    for i in range(8):
        q.admit(f"x{i}", "x", 5, 600)  # the fleet full of a third tenant's jobs
    for i in range(20):
        q.admit(f"a{i}", "a", 5, 600)
        q.admit(f"b{i}", "b", 5, 600)
    started = []
    for i in range(8):
        started += q.pick((f"x{i}", "x"))
    assert sum(j.startswith("a") for j in started) == 6 and sum(j.startswith("b") for j in started) == 2


def test_within_a_tenant_the_most_urgent_job_goes_first() -> None:
    q = queue(TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    q.admit("first", "a", 5, 600)
    q.admit("low", "a", 1, 600)
    q.admit("urgent", "a", 9, 600)
    assert q.pick(("first", "a")) == ["urgent"]
    assert q.pick(("urgent", "a")) == ["low"]


def test_a_job_that_ended_unseen_frees_its_slot_at_its_expiry() -> None:
    q = queue(TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    assert q.admit("gone", "a", 5, 0.001) == "admitted"
    assert q.admit("next", "a", 5, 600) in ("admitted", "waiting")
    assert "next" in q.pick() + q.running_jobs("a")


def test_a_cancelled_waiting_job_leaves_the_list() -> None:
    q = queue(TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    q.admit("a0", "a", 5, 600)
    q.admit("a1", "a", 5, 600)
    q.pick(("a1", "a"), most=0)  # its end, while it waited
    assert q.load(["a"])["a"].waiting == 0
    assert q.pick(("a0", "a")) == []


def test_every_tenant_key_has_a_ttl() -> None:
    q = queue(TenantSettings(default=TenantPolicy(max_running_jobs=1)))
    q.admit("a0", "a", 5, 600)
    q.admit("a1", "a", 5, 600)
    for key in q.redis.keys("*"):
        assert q.redis.ttl(key) > 0, key


NOON = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


def test_a_quota_used_up_refuses_with_the_quota_and_its_reset() -> None:
    usage = TenantUsage(fakeredis.FakeRedis(), "t")
    policy = TenantPolicy(max_tokens=1000, max_cost_usd=2.0)
    assert usage.refusal("a", policy, now=NOON) is None
    usage.add("a", 600, 0.5, now=NOON)
    usage.add("a", 400, 0.5, now=NOON + 60)
    reason = usage.refusal("a", policy, now=NOON + 120)
    assert reason is not None
    assert "max_tokens=1000" in reason and "1000 tokens" in reason
    assert "2026-11-30T00:00:00Z" in reason and "midnight UTC" in reason
    assert usage.refusal("b", policy, now=NOON) is None  # another tenant's count


def test_the_cost_quota_refuses_too() -> None:
    usage = TenantUsage(fakeredis.FakeRedis(), "t")
    usage.add("a", 10, 3.0, now=NOON)
    reason = usage.refusal("a", TenantPolicy(max_cost_usd=2.5), now=NOON)
    assert reason is not None and "max_cost_usd=2.5" in reason


def test_the_quota_resets_at_midnight_utc() -> None:
    usage = TenantUsage(fakeredis.FakeRedis(), "t")
    before = datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC).timestamp()
    usage.add("a", 5000, 0.0, now=before)
    assert usage.refusal("a", TenantPolicy(max_tokens=10), now=before) is not None
    assert usage.refusal("a", TenantPolicy(max_tokens=10), now=before + 2) is None
    assert utc_day(before + 2) == "2026-11-30"
    assert next_reset(before) == datetime(2026, 11, 30, tzinfo=UTC)
    assert usage.redis.ttl(usage.key("a", "2026-11-29")) > 86400


@pytest.mark.parametrize("tokens", [0, -5])
def test_nothing_counted_writes_nothing(tokens: int) -> None:
    usage = TenantUsage(fakeredis.FakeRedis(), "t")
    usage.add("a", tokens, 0.0, now=NOON)
    assert usage.redis.keys("*") == []
