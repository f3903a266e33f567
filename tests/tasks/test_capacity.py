"""``HostCapacity``: fleet-wide slots, budgets and back-off, on fakeredis (Lua) and on real Redis."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import fakeredis
import pytest
from redis import Redis

from tandem.tasks.hosts.capacity import (
    Grant,
    HostCapacity,
    HostLimits,
    SlotKeeper,
    Wait,
    known_hosts,
    snapshot,
)
from tandem.workers.embedded import redis_answers
from tests.tasks.slots import SlotCheckingRedis

REAL_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["fakeredis", "slots", pytest.param("redis", marks=pytest.mark.integration)])
def redis(request: pytest.FixtureRequest) -> Iterator[Redis]:
    """fakeredis always (also with Redis Cluster's one-slot rule: each script's keys share the
    host's slot); the real server when one answers (keys under a unique prefix, removed)."""
    if request.param in ("fakeredis", "slots"):
        yield fakeredis.FakeRedis() if request.param == "fakeredis" else SlotCheckingRedis()
        return
    if not redis_answers(REAL_REDIS):
        pytest.skip("no Redis at 127.0.0.1:6379")
    client = Redis.from_url(REAL_REDIS)
    yield client
    client.close()


@pytest.fixture
def prefix(redis: Redis) -> Iterator[str]:
    name = f"test-cap-{uuid.uuid4().hex[:8]}"
    yield name
    for key in redis.scan_iter(f"{name}:*"):
        redis.delete(key)


def limiter(redis: Redis, prefix: str, lease: float = 30.0, **limits: float) -> HostCapacity:
    host = HostLimits("http://gpu-1:8000/v1", **limits)  # type: ignore[arg-type]
    return HostCapacity(redis, prefix, host, lease_seconds=lease)


def test_in_flight_slots_are_capped_and_freed(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=2)
    first, second = cap.acquire(10), cap.acquire(10)
    assert isinstance(first, Grant) and isinstance(second, Grant)
    refused = cap.acquire(10)
    assert isinstance(refused, Wait) and refused.reason == "in_flight"
    assert 29 < refused.seconds <= 30.01  # at the latest when the oldest lease runs out
    assert "free in-flight slot" in refused.describe()
    cap.release(first)
    assert isinstance(cap.acquire(10), Grant)


def test_a_dead_workers_slot_frees_itself(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, lease=0.5, max_in_flight=1)
    assert isinstance(cap.acquire(1), Grant)  # never released: its worker "died"
    assert isinstance(cap.acquire(1), Wait)
    time.sleep(0.7)
    assert isinstance(cap.acquire(1), Grant)


def test_renewed_slots_outlive_their_lease(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, lease=0.6, max_in_flight=1)
    grant = cap.acquire(1)
    assert isinstance(grant, Grant)
    keeper = SlotKeeper(interval=0.15)
    keeper.hold(cap, grant)
    try:
        time.sleep(1.0)
        assert isinstance(cap.acquire(1), Wait)
        keeper.drop(grant)
        time.sleep(0.9)
        assert isinstance(cap.acquire(1), Grant)
    finally:
        keeper.stop()


def test_requests_per_minute(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, rpm=2)  # a burst of one request: paced, one every 30 s
    assert isinstance(cap.acquire(1), Grant)
    refused = cap.acquire(1)
    assert isinstance(refused, Wait) and refused.reason == "rpm"
    assert 29 < refused.seconds <= 30.26  # one request comes back every 60.5/2 s (rate_buckets.GRACE)


def test_tokens_are_estimated_then_corrected(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, tpm=2000, burst_seconds=30)  # 1000 at once, then 1000 a minute
    first = cap.acquire(400)
    second = cap.acquire(400)
    assert isinstance(first, Grant) and isinstance(second, Grant)
    refused = cap.acquire(400)  # 200 left
    assert isinstance(refused, Wait) and refused.reason == "tpm"
    assert 11 < refused.seconds <= 12.11  # 200 tokens at (2000 - 1000)/60.5 a second
    cap.release(first, used_tokens=100)  # used 300 fewer than estimated: refunded
    assert isinstance(cap.acquire(400), Grant)
    cap.release(second, used_tokens=1400)  # used 1000 more: the budget goes negative
    refused = cap.acquire(10)
    assert isinstance(refused, Wait) and refused.reason == "tpm"
    assert refused.seconds > 50  # -900 tokens: (900 + 10) at 1000/60 a second
    snap = snapshot(redis, prefix, cap.limits)
    assert snap.tokens_available is not None and snap.tokens_available < 0
    assert snap.stats["tokens"] == 1500


def test_a_call_larger_than_the_budget_waits_for_a_full_bucket(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, tpm=100)
    assert isinstance(cap.acquire(5000), Grant)  # never starved: a full bucket lets it through


def test_back_off_window_then_exactly_one_probe(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=10)
    grant = cap.acquire(1)
    assert isinstance(grant, Grant)
    cap.release(grant, success=False, back_off=0.6)  # the host answered 429, Retry-After 0.6
    refused = cap.acquire(1)
    assert isinstance(refused, Wait) and refused.reason == "backoff"
    assert 0.4 < refused.seconds <= 0.61
    time.sleep(0.7)
    probe = cap.acquire(1)
    assert isinstance(probe, Grant) and probe.probe
    others = [cap.acquire(1) for _ in range(5)]
    assert all(isinstance(o, Wait) and o.reason == "probe" for o in others)
    cap.release(probe, success=False, back_off=0.4)  # still overloaded: a new window
    assert isinstance(cap.acquire(1), Wait)
    time.sleep(0.5)
    probe = cap.acquire(1)
    assert isinstance(probe, Grant) and probe.probe
    cap.release(probe, used_tokens=5)  # the host is back
    granted = [cap.acquire(1) for _ in range(5)]
    assert all(isinstance(g, Grant) and not g.probe for g in granted)
    stats = snapshot(redis, prefix, cap.limits).stats
    assert (stats["rate_limited"], stats["probes"]) == (2, 2)


def test_a_call_in_flight_before_the_window_does_not_close_it(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix)
    early, failing = cap.acquire(1), cap.acquire(1)
    assert isinstance(early, Grant) and isinstance(failing, Grant)
    cap.release(failing, success=False, back_off=5)
    cap.release(early, used_tokens=3)  # succeeded, but started before the 429
    assert isinstance(cap.acquire(1), Wait)


def test_waiters_are_woken_by_a_freed_slot_most_urgent_first(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=1)
    grant = cap.acquire(1)
    assert isinstance(grant, Grant)
    assert cap.wait_for_slot("job-a:0:actor", {"name": "a"}, priority=5) == (False, True)
    assert cap.wait_for_slot("job-b:0:actor", {"name": "b"}, priority=9) == (False, True)
    # the same step again (its re-queued copy): registered once, no second copy scheduled
    assert cap.wait_for_slot("job-a:0:actor", {"name": "a"}, priority=5) == (False, False)
    assert snapshot(redis, prefix, cap.limits).waiting == 2
    assert cap.release(grant) == [{"name": "b"}]
    grant = cap.acquire(1)
    assert isinstance(grant, Grant)
    assert cap.release(grant) == [{"name": "a"}]
    assert cap.release(Grant("gone", 1)) == []


def test_a_slot_freed_before_registration_is_reported(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=1)
    assert cap.wait_for_slot("job:0:actor", {"name": "x"}) == (True, True)
    assert snapshot(redis, prefix, cap.limits).waiting == 0


def test_hosts_are_listed_with_their_limits(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=3, rpm=60, tpm=6000, burst_seconds=6)
    grant = cap.acquire(100)
    assert isinstance(grant, Grant)
    assert known_hosts(redis, prefix) == [cap.limits]
    snap = snapshot(redis, prefix, cap.limits)
    assert snap.in_flight == 1
    assert (snap.requests_burst, snap.tokens_burst) == (6, 600)
    assert snap.requests_available == pytest.approx(5, abs=0.1)
    assert snap.tokens_available == pytest.approx(500, abs=5)
    assert snap.backoff_until is None


def test_every_key_has_a_ttl(redis: Redis, prefix: str) -> None:
    cap = limiter(redis, prefix, max_in_flight=1, rpm=10, tpm=100)
    grant = cap.acquire(10)
    assert isinstance(grant, Grant)
    cap.wait_for_slot("j:0:actor", {"name": "x"})
    cap.release(grant, success=False, back_off=3)
    keys = list(redis.scan_iter(f"{prefix}:*"))
    assert len(keys) >= 6
    assert all(redis.ttl(k) > 0 for k in keys), {k: redis.ttl(k) for k in keys}


@pytest.mark.integration
def test_many_threads_never_exceed_the_cap_on_real_redis() -> None:
    if not redis_answers(REAL_REDIS):
        pytest.skip("no Redis at 127.0.0.1:6379")
    client = Redis.from_url(REAL_REDIS, max_connections=64)
    prefix = f"test-cap-{uuid.uuid4().hex[:8]}"
    caps = [limiter(client, prefix, max_in_flight=5) for _ in range(3)]  # three "workers"
    lock = threading.Lock()
    state = {"now": 0, "max": 0, "done": 0}

    def call(cap: HostCapacity) -> None:
        while True:
            grant = cap.acquire(1)
            if isinstance(grant, Grant):
                break
            time.sleep(0.005)
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.02)
        with lock:
            state["now"] -= 1
            state["done"] += 1
        cap.release(grant)

    threads = [threading.Thread(target=call, args=(caps[i % 3],)) for i in range(60)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert state["done"] == 60
        assert state["max"] == 5
    finally:
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()
