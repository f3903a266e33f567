"""The indexes of recent jobs over fakeredis (``tandem.tasks.state.recent``): kept at intake and at
the end with the store's TTL, a tenant's list reads its own index past other tenants' newer jobs
and past expired entries, and jobs indexed before tenants had an index join theirs at their end."""

from __future__ import annotations

import time

import fakeredis
import pytest

from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state import recent as recent_module
from tandem.tasks.state.keys import recent_shard_key, tenant_recent_key, tenant_recent_keys
from tandem.tasks.state.recent import PRUNE_GRACE, RECENT_LIMIT
from tandem.tasks.state.store import JobStore
from tests.tasks.slots import SlotCheckingRedis

TTL = 600


@pytest.fixture
def store() -> JobStore:
    """On fakeredis with Redis Cluster's one-slot rule: each index write stays in its own slot."""
    return JobStore(SlotCheckingRedis(server=fakeredis.FakeServer()), prefix="t", ttl=TTL)


def end(store: JobStore, job_id: str, owner: str) -> None:
    store.finish(JobResult(job_id=job_id, status="completed", owner=owner), ttl=TTL)


def test_an_end_keeps_both_indexes_as_long_as_the_jobs_keys(store: JobStore) -> None:
    store.create("job", JobSpec(goal="g", owner="team-a"))
    mine, shared = tenant_recent_key("t", "team-a", "job"), recent_shard_key("t", "job")
    for key in (mine, shared):  # the job ran for most of the TTL: its indexes are about to go
        store.redis.expire(key, 5)
    end(store, "job", "team-a")
    assert TTL - 5 < store.redis.ttl(store.key("job", "result")) <= TTL
    assert TTL - 5 < store.redis.ttl(mine) <= TTL and TTL - 5 < store.redis.ttl(shared) <= TTL
    assert [s.job_id for s in store.recent(5, owner="team-a")] == ["job"]


def test_a_job_indexed_before_tenants_had_an_index_joins_its_tenants_at_its_end(store: JobStore) -> None:
    submitted = time.time() - 5000
    store.remember("old", at=submitted)  # an earlier version's intake: the shared index only
    store.create("old", JobSpec(goal="g", owner="team-a"))
    store.redis.zrem(tenant_recent_key("t", "team-a", "old"), "old")
    assert store.redis.zscore(tenant_recent_key("t", "team-a", "old"), "old") is None
    end(store, "old", "team-a")
    assert store.redis.zscore(tenant_recent_key("t", "team-a", "old"), "old") == pytest.approx(submitted)
    store.remember("new", owner="team-a")
    store.set_status("new", state="queued", owner="team-a")
    end(store, "new", "team-a")  # indexed there already: its time is kept
    assert [s.job_id for s in store.recent(5, owner="team-a")] == ["new", "old"]


def test_expired_jobs_leave_the_index_when_a_list_meets_them_and_the_page_stays_full(store: JobStore) -> None:
    start = time.time() - 10 * PRUNE_GRACE
    for i in range(5):  # older jobs, still kept (a long one, say), in the tenant's index alone
        store.remember(f"live-{i}", at=start + i, owner="team-a")
        store.set_status(f"live-{i}", state="running", owner="team-a")
        store.redis.zrem(recent_shard_key("t", f"live-{i}"), f"live-{i}")
    for i in range(60):  # newer ones whose keys have expired
        store.remember(f"gone-{i}", at=start + 100 + i, owner="team-a")
    store.remember("just-indexed", owner="team-a")  # its record is a moment away
    listed = [s.job_id for s in store.recent(5, owner="team-a")]
    assert listed == [f"live-{i}" for i in reversed(range(5))]
    left = {m.decode() for key in tenant_recent_keys("t", "team-a") for m in store.redis.zrange(key, 0, -1)}
    assert left == {f"live-{i}" for i in range(5)} | {"just-indexed"}


def test_a_trim_keeps_the_newest_by_rank_never_an_old_job_that_still_runs(
    store: JobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.remember("long-job", at=time.time() - 10 * TTL, owner="team-a")  # submitted long ago
    store.set_status("long-job", state="awaiting_approval", owner="team-a")
    monkeypatch.setattr(recent_module.random, "randrange", lambda n: 0)  # every call trims
    store.mark_queued("another", owner="team-a")
    assert [s.job_id for s in store.recent(5, owner="team-a")] == ["another", "long-job"]


def test_a_tenants_list_reads_its_own_index_past_other_tenants_newer_jobs(store: JobStore) -> None:
    """The report: a tenant's list was filtered from the newest 1,000 jobs of every tenant."""
    store.mark_queued("mine", owner="team-a")
    store.redis.zadd(tenant_recent_key("t", "team-a", "mine"), {"mine": time.time() - 100}, xx=True)
    pipe = store.redis.pipeline(transaction=False)
    for i in range(RECENT_LIMIT + 50):
        store.remember(f"theirs-{i}", time.time() + i, owner="team-b", pipe=pipe)
        pipe.hset(store.key(f"theirs-{i}", "state"), mapping={"state": "queued", "owner": "team-b"})
    pipe.execute()
    assert [s.job_id for s in store.recent(50, owner="team-a")] == ["mine"]
    assert "mine" not in {s.job_id for s in store.recent(RECENT_LIMIT)}  # the shared index: crowded out
