"""Tenant caps and fair share of job starts on real workers, and a daily quota's refusal (docs/tenants.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tandem.tasks.tenants.queue import tenant_base
from tandem.tasks.tenants.usage import utc_day
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

TENANTS = {
    "default": {"max_running_jobs": 2},
    "team-a": {"weight": 1},
    "team-b": {"weight": 1},
    "over": {"max_tokens": 100},
    "solo": {"max_running_jobs": 1},
}


@pytest.fixture
def cluster(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer, OpenAIServer]]:
    yield from _make_cluster(redis_base, TANDEM_TENANTS=json.dumps(TENANTS), TANDEM_MAX_RUNNING_JOBS="2")


def test_a_later_tenants_jobs_start_before_a_burst_drains(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    c, _thinker, _actor = cluster
    burst = [c.submit(goal=f"a job {i}", reasoner="mono", owner="team-a") for i in range(30)]
    late = [c.submit(goal=f"b job {i}", reasoner="mono", owner="team-b") for i in range(3)]
    c.start("tools")  # takes the intake; no Actor worker yet: every job is admitted or waiting
    waiting = [f"{tenant_base(c.settings.prefix)}waiting:{t}" for t in ("team-a", "team-b")]
    deadline = time.monotonic() + EVENT_SECONDS
    while sum(c.redis.zcard(k) for k in waiting) < 31 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [c.redis.zcard(k) for k in waiting] == [28, 3]  # the fleet cap of 2 went to A's first two
    c.start("actor", concurrency={"actor": 4})
    for handle in burst + late:
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"

    def started(job_id: str) -> float:  # held jobs: when the gate started them; the others at intake
        admitted, created = c.redis.hmget(c.store.key(job_id, "state"), ["admitted_at", "created_at"])
        return float(admitted or created)

    starts = {h.id: started(h.id) for h in burst + late}
    held = [h.id for h in burst + late if c.redis.hget(c.store.key(h.id, "state"), "admitted_at")]
    assert len(held) == 31  # all but A's first two waited for their turn
    last_b = max(starts[h.id] for h in late)
    a_after = [h.id for h in burst if starts[h.id] > last_b]
    # Fleet cap 2, equal weights: a freed slot goes to B (fewer running) before A's backlog.
    assert len(a_after) >= 22, f"only {len(a_after)} of A's 30 jobs started after B's last one"
    # Usage counted per tenant and UTC day.
    tokens = c.redis.hget(f"{tenant_base(c.settings.prefix)}usage:team-a:{utc_day(time.time())}", "tokens")
    assert int(tokens or 0) > 0


def test_a_tenant_over_its_daily_quota_is_refused_with_the_reset(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    c, _thinker, _actor = cluster
    key = f"{tenant_base(c.settings.prefix)}usage:over:{utc_day(time.time())}"
    c.redis.hset(key, "tokens", 100)
    c.redis.expire(key, 3600)
    c.start("actor")
    result = c.submit(goal="one more", reasoner="mono", owner="over").result(timeout=RESULT_SECONDS)
    assert result.status == "failed"
    assert result.error is not None
    assert "max_tokens=100" in result.error and "midnight UTC" in result.error and "'over'" in result.error
    ok = c.submit(goal="fine", reasoner="mono", owner="team-b").result(timeout=RESULT_SECONDS)
    assert ok.status == "completed"


def test_a_waiting_job_says_why_holds_nothing_and_can_be_cancelled(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    c, _thinker, _actor = cluster
    c.start("tools")  # takes the intake; no Actor worker yet: the started job's step stays queued
    jobs = {h.id: h for h in (c.submit(goal=f"job {i}", reasoner="mono", owner="solo") for i in range(3))}
    waiting_key = f"{tenant_base(c.settings.prefix)}waiting:solo"
    deadline = time.monotonic() + EVENT_SECONDS
    while c.redis.zcard(waiting_key) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting = [j.decode() for j in c.redis.zrange(waiting_key, 0, -1)]
    assert len(waiting) == 2  # cap 1: one started, two wait
    # Intake takes the job's place in the waiting list before it writes the record that says so.
    while {jobs[j].status().state for j in waiting} != {"waiting"} and time.monotonic() < deadline:
        time.sleep(0.05)
    for job_id in waiting:
        status = jobs[job_id].status()
        assert status.state == "waiting" and status.waiting is not None and status.waiting.reason == "tenant"
        assert "'solo' runs at most 1 jobs at once" in status.waiting.detail
    queued = [m for q in ("actor", "celery") for m in c.redis.lrange(q, 0, -1)]
    assert not any(job_id.encode() in m for job_id in waiting for m in queued)  # no message: no worker held
    gone, kept = waiting
    jobs[gone].cancel()
    assert jobs[gone].result(timeout=RESULT_SECONDS).status == "cancelled"
    deadline = time.monotonic() + EVENT_SECONDS  # its end (or a worker's sweep) frees its place
    while c.redis.zcard(waiting_key) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [j.decode() for j in c.redis.zrange(waiting_key, 0, -1)] == [kept]
    c.start("actor")
    for job_id, handle in jobs.items():
        if job_id != gone:
            assert handle.result(timeout=RESULT_SECONDS).status == "completed"


def test_a_resumed_job_waits_for_its_tenants_turn_and_starts_when_a_slot_frees(
    cluster: tuple[Cluster, OpenAIServer, OpenAIServer],
) -> None:
    """docs/tenants.md, "Other ways in": a resume goes through admission like a submitted job."""
    c, _thinker, _actor = cluster
    c.start("thinker", "actor", "tools")
    ended = c.submit(goal="NEVER_DONE keep reading", reasoner="mono", max_rounds=1, owner="solo")
    assert ended.result(timeout=RESULT_SECONDS).status == "truncated"
    blocker = c.submit(goal="NEVER_DONE keep reading", reasoner="mono", max_rounds=400, owner="solo")
    deadline = time.monotonic() + EVENT_SECONDS
    while blocker.status().state != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        ended.resume(max_rounds=3)
        status = ended.status()
        assert status.state == "waiting" and status.waiting is not None and status.waiting.reason == "tenant"
        queued = [m for q in ("thinker", "actor", "tools", "celery") for m in c.redis.lrange(q, 0, -1)]
        assert not any(ended.id.encode() in m for m in queued)  # held: no message, no worker
        time.sleep(1.0)
        assert ended.status().state == "waiting"  # still, while the blocker holds the tenant's slot
    finally:
        blocker.cancel()
    assert blocker.result(timeout=RESULT_SECONDS).status == "cancelled"
    result = ended.result(timeout=RESULT_SECONDS)  # admitted at the blocker's end, then it ran on
    assert result.status == "truncated" and result.rounds == 3, result
    assert c.redis.hget(c.store.key(ended.id, "state"), "admitted_at")


def test_a_bad_tenant_setting_stops_the_worker_at_start_naming_it() -> None:
    env = {
        **os.environ,
        "TANDEM_TENANTS": '{"acme": {"max_running_jobs": 0}}',
        "TANDEM_BROKER_URL": "redis://127.0.0.1:1/0",
        "PYTHONPATH": str(ROOT),
    }
    for argv in (
        [sys.executable, "-m", "tandem.workers.cli", "worker", "actor"],
        [sys.executable, "-m", "celery", "-A", "tandem.tasks.app", "worker", "-P", "solo"],
    ):
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert out.returncode != 0, argv
        text = out.stderr + out.stdout
        assert "TANDEM_TENANTS: tenant 'acme' field 'max_running_jobs' = 0" in text, text[-2000:]
