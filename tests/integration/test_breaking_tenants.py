"""Breaking tests of tenant caps, fair share and daily quotas, written from docs/tenants.md alone
(issue 35): a tenant gaming the share (urgent priorities, a weight in its spec, its own slots or
counts written through the documented client ACL user, a faked child), and the daily quota's reset
at midnight UTC (the usage key of yesterday and of today, as the docs name it).

Real ``celery worker`` processes on the real Redis.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from redis import Redis
from redis.exceptions import NoPermissionError

from tandem.client.submission import submit
from tandem.tasks.errors import JobSpecError
from tests.integration import acl_client
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
TENANTS = {
    "default": {"max_running_jobs": 2},
    "team-a": {"weight": 1},
    "team-b": {"weight": 1},
    "tok": {"max_tokens": 100},
    "usd": {"max_cost_usd": 2},
    "solo": {"max_running_jobs": 1},
}


@pytest.fixture
def cluster(redis_base: str) -> Iterator[Hosts]:
    yield from _make_cluster(redis_base, TANDEM_TENANTS=json.dumps(TENANTS), TANDEM_MAX_RUNNING_JOBS="2")


def tenants(c: Cluster) -> str:
    """``<prefix>:tenants:{fair}:`` (docs/tenants.md, "How it is kept")."""
    return f"{c.settings.prefix}:tenants:{{fair}}:"


def day(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d")


def started_at(c: Cluster, job_id: str) -> float:
    """When the job started: a held job when the gate started it, the others at intake."""
    admitted, created = c.redis.hmget(c.store.key(job_id, "state"), ["admitted_at", "created_at"])
    return float(admitted or created or 0)


def test_urgent_priorities_do_not_buy_a_burst_a_larger_share(cluster: Hosts) -> None:
    c, _, _ = cluster
    burst = [c.submit(goal=f"a job {i}", reasoner="mono", owner="team-a", priority=9) for i in range(30)]
    late = [c.submit(goal=f"b job {i}", reasoner="mono", owner="team-b", priority=0) for i in range(3)]
    c.start("tools")  # takes the intake; no Actor worker yet: every job is admitted or waiting
    waiting = [f"{tenants(c)}waiting:{t}" for t in ("team-a", "team-b")]
    wait_for(lambda: sum(c.redis.zcard(k) for k in waiting) == 31, EVENT_SECONDS, "31 jobs to wait")
    assert [c.redis.zcard(k) for k in waiting] == [28, 3]
    running = {x.decode() for x in c.redis.zrange(f"{tenants(c)}running", 0, -1)}
    assert len(running) == 2 and running <= {h.id for h in burst}  # A's burst came first
    c.start("actor", concurrency={"actor": 4})
    for handle in burst + late:
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    starts = {h.id: started_at(c, h.id) for h in burst + late}
    last_b = max(starts[h.id] for h in late)
    a_after = [h.id for h in burst if starts[h.id] > last_b]
    # Equal weights: a freed slot goes to the tenant with fewer running jobs, whatever A's priority.
    assert len(a_after) >= 22, f"only {len(a_after)} of A's 30 priority-9 jobs started after B's last"


def test_a_spec_cannot_carry_a_weight_or_a_cap(cluster: Hosts) -> None:
    c, _, _ = cluster
    for field, value in (("weight", 1000), ("max_running_jobs", 1000), ("tenant", "team-b")):
        with pytest.raises(JobSpecError, match=field):
            c.submit(goal="more share", reasoner="mono", owner="team-a", **{field: value})
    assert [k for k in c.redis.scan_iter(match=f"{c.settings.prefix}:{{*}}:state")] == []  # nothing queued


@pytest.fixture
def client_user(cluster: Hosts) -> Iterator[Redis]:
    with acl_client.client_user(cluster[0]) as client:
        yield client


def test_the_client_user_cannot_free_its_slots_or_reset_its_count(cluster: Hosts, client_user: Redis) -> None:
    c, _, _ = cluster
    c.start("tools")  # the intake; no Actor worker: the started job holds its slot
    first = c.submit(goal="holds the slot", reasoner="mono", owner="solo")
    second = c.submit(goal="waits", reasoner="mono", owner="solo")
    running, waiting = f"{tenants(c)}running:solo", f"{tenants(c)}waiting:solo"
    wait_for(lambda: c.redis.zcard(waiting) == 1, EVENT_SECONDS, "solo's second job to wait")
    [held] = [x.decode() for x in c.redis.zrange(running, 0, -1)]
    if held != first.id:  # the intake's threads took the two messages in the other order
        first, second = second, first
    assert held == first.id
    usage = f"{tenants(c)}usage:solo:{day(datetime.now(UTC))}"
    c.redis.hset(usage, "tokens", 7)
    c.redis.expire(usage, 3600)
    assert client_user.zcard(running) == 1  # it reads them (``tandem tenants``)
    for write in (
        lambda: client_user.zrem(running, first.id),
        lambda: client_user.zrem(f"{tenants(c)}running", first.id),
        lambda: client_user.zadd(waiting, {second.id: 0}),
        lambda: client_user.hset(usage, "tokens", 0),
        lambda: client_user.expire(usage, 1),
    ):
        with pytest.raises(NoPermissionError):
            write()
    assert [x.decode() for x in c.redis.zrange(running, 0, -1)] == [first.id]
    assert [x.decode() for x in c.redis.zrange(waiting, 0, -1)] == [second.id]
    assert c.redis.hget(usage, "tokens") == b"7"
    assert second.status().state == "waiting"


def test_a_faked_child_does_not_start_past_its_tenants_cap(cluster: Hosts, client_user: Redis) -> None:
    c, _, _ = cluster
    c.start("tools")  # the intake; no Actor worker: the started job holds its slot
    first = c.submit(goal="holds the slot", reasoner="mono", owner="solo")
    running, waiting = f"{tenants(c)}running:solo", f"{tenants(c)}waiting:solo"
    wait_for(lambda: c.redis.zcard(running) == 1, EVENT_SECONDS, "solo's first job to start")
    fake = str(uuid.uuid4())
    # The documented client user writing the running job's children index (if refused, the spec
    # below merely names a parent).
    with contextlib.suppress(NoPermissionError):
        client_user.zadd(c.store.key(first.id, "children"), {fake: time.time()})
        client_user.expire(c.store.key(first.id, "children"), 3600)
    spec = {"goal": "past the cap", "reasoner": "mono", "owner": "solo", "parent_id": first.id}
    second = submit(spec, app=c.app, store=c.store, job_id=fake)
    wait_for(lambda: second.status().state != "queued", EVENT_SECONDS, "the intake to take the job")
    assert second.status().state == "waiting"
    assert [x.decode() for x in c.redis.zrange(waiting, 0, -1)] == [fake]


QUOTA_MESSAGE = re.compile(
    r"tenant '(?P<tenant>[^']+)' has used its daily quota (?P<quota>max_tokens=100|max_cost_usd=2): "
    r".* today \(UTC\); the quota resets at (?P<reset>\d{4}-\d\d-\d\dT00:00:00Z) \(midnight UTC, in "
    r"(?P<h>\d+)h(?P<m>\d\d)m\)$"
)


def test_yesterdays_usage_does_not_refuse_today_and_todays_names_quota_and_reset(cluster: Hosts) -> None:
    c, _, _ = cluster
    c.start("actor")
    now = datetime.now(UTC)
    yesterday, today = now - timedelta(days=1), now
    for tenant, field, value in (("tok", "tokens", 10_000), ("usd", "cost_usd", 50.0)):
        key = f"{tenants(c)}usage:{tenant}:{day(yesterday)}"
        c.redis.hset(key, field, value)
        c.redis.expire(key, 3600)
    for tenant in ("tok", "usd"):  # over yesterday's quota, nothing counted today: runs
        result = c.submit(goal="a new day", reasoner="mono", owner=tenant).result(timeout=RESULT_SECONDS)
        assert result.status == "completed", result
    for tenant, field, value, quota in (
        ("tok", "tokens", 100, "max_tokens=100"),
        ("usd", "cost_usd", 2.0, "max_cost_usd=2"),
    ):
        key = f"{tenants(c)}usage:{tenant}:{day(today)}"
        c.redis.hset(key, field, value)  # exactly at the quota: "has reached" refuses
        c.redis.expire(key, 3600)
        sent = datetime.now(UTC)
        result = c.submit(goal="over today", reasoner="mono", owner=tenant).result(timeout=RESULT_SECONDS)
        ended = datetime.now(UTC)
        assert result.status == "failed" and result.error is not None, result
        found = QUOTA_MESSAGE.match(result.error)
        assert found is not None, result.error
        assert (found["tenant"], found["quota"]) == (tenant, quota)
        midnights = {
            f"{day(t + timedelta(days=1))}T00:00:00Z" for t in (sent, ended)
        }  # the next midnight UTC (a test that spans midnight may see either)
        assert found["reset"] in midnights, (found["reset"], midnights)
        reset = datetime.strptime(found["reset"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        left_min = int(found["h"]) * 60 + int(found["m"])
        assert (reset - ended).total_seconds() // 60 - 1 <= left_min <= (reset - sent).total_seconds() // 60
        # no model call of the refused job: nothing added to today's count
        assert float(c.redis.hget(key, field) or 0) == value
