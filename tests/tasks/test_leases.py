"""``StepLease`` and ``Watchdog``: exclusive steps, heartbeats, and takeover of a dead worker's step.

Each test runs on fakeredis (with Lua) and on the real Redis at 127.0.0.1:6379 db 8, which is
skipped when absent locally and required in CI (``CI=true``). Keys get a fresh prefix per test.

A dead worker is simulated without waiting for a TTL: its heartbeat is stopped, its lease key
deleted and its ``leases`` entry dated in the past, which is what Redis holds once it has expired.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.tasks.leases import LeaseKeys, StepLease, Watchdog, server_time

REAL_REDIS_URL = "redis://127.0.0.1:6379/8"


def _real_redis() -> Redis:
    client = Redis.from_url(REAL_REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except (RedisConnectionError, OSError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis answers at {REAL_REDIS_URL}: CI needs one ({exc})")
        pytest.skip(f"no Redis answers at {REAL_REDIS_URL}")
    return client


@pytest.fixture(params=["fakeredis", "redis"])
def new_client(request: pytest.FixtureRequest) -> Iterator[Callable[[], Redis]]:
    """Makes connections to one server: each stands for another worker."""
    clients: list[Redis] = []
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()

        def make() -> Redis:
            clients.append(fakeredis.FakeRedis(server=server))
            return clients[-1]
    else:
        _real_redis().close()

        def make() -> Redis:
            clients.append(Redis.from_url(REAL_REDIS_URL))
            return clients[-1]

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def redis(new_client: Callable[[], Redis]) -> Redis:
    return new_client()


@pytest.fixture
def keys(redis: Redis) -> Iterator[LeaseKeys]:
    prefix = f"test-leases-{uuid.uuid4().hex[:12]}"
    yield LeaseKeys(prefix)
    for key in redis.scan_iter(match=f"{prefix}:*"):
        redis.delete(key)


DISPATCH = {"name": "tandem.actor_turn", "args": ["job", 0], "options": {"task_id": "job"}}


def lease(redis: Redis, keys: LeaseKeys, step: str = "job:actor:0", seconds: float = 30.0) -> StepLease:
    return StepLease(redis, keys, step, seconds, DISPATCH)


def kill(held: StepLease) -> None:
    """The worker holding ``held`` died: no more heartbeats, and its lease has run out."""
    held._stop.set()
    if held._thread is not None:
        held._thread.join()
    expire(held.redis, held.keys, held.step_id)


def expire(redis: Redis, keys: LeaseKeys, step: str) -> None:
    redis.delete(keys.lease(step))
    redis.zadd(keys.leases, {step: 0})


class Sends:
    """Records what a watchdog sends again and gives up on."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.given_up: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.any_sent = threading.Event()

    def send(self, dispatch: dict[str, Any]) -> None:
        with self.lock:
            self.sent.append(dispatch)
        self.any_sent.set()

    def give_up(self, step_id: str, dispatch: dict[str, Any]) -> None:
        self.given_up.append((step_id, dispatch))

    def watchdog(self, redis: Redis, keys: LeaseKeys, **kwargs: Any) -> Watchdog:
        return Watchdog(redis, keys, 30.0, self.send, self.give_up, **kwargs)


# -- leases ---------------------------------------------------------------------------------------


def test_acquire_is_exclusive(redis: Redis, keys: LeaseKeys) -> None:
    first, second = lease(redis, keys), lease(redis, keys)
    assert first.acquire() is True
    try:
        assert second.acquire() is False
        assert lease(redis, keys, step="job:actor:1").acquire() is True  # another step is free
    finally:
        first.release()


def test_acquire_records_the_step_for_a_takeover(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    with held:
        assert redis.get(keys.lease(held.step_id)) == held.token.encode()
        assert redis.hget(keys.dispatch, held.step_id) is not None
        score = redis.zscore(keys.leases, held.step_id)
        assert score is not None and score > server_time(redis)


def test_release_frees_the_step(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    with held:
        pass  # the context manager releases

    assert redis.exists(keys.lease(held.step_id)) == 0
    assert redis.zscore(keys.leases, held.step_id) is None
    assert redis.hget(keys.dispatch, held.step_id) is None
    again = lease(redis, keys)
    assert again.acquire() is True
    again.release()


def test_a_heartbeat_keeps_the_lease_past_its_ttl(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys, seconds=1.0)  # renewed every third of a second
    assert held.acquire()
    try:
        threading.Event().wait(2.5)  # two and a half lease periods: without renewal it would be gone
        assert redis.get(keys.lease(held.step_id)) == held.token.encode()
        score = redis.zscore(keys.leases, held.step_id)
        assert score is not None and score > server_time(redis)
        assert lease(redis, keys).acquire() is False
        assert Sends().watchdog(redis, keys).sweep() == 0
    finally:
        held.release()


def test_a_taken_over_workers_release_leaves_the_new_owner_protected(redis: Redis, keys: LeaseKeys) -> None:
    """Worker A's lease ran out (A was only stalled) and B took the step over. When A finishes and
    releases, B's lease, its ``leases`` entry and its dispatch must stay, or B dying would go
    unnoticed."""
    a = lease(redis, keys)
    assert a.acquire()
    kill(a)
    b = StepLease(redis, keys, a.step_id, 30.0, {**DISPATCH, "by": "b"})
    assert b.acquire()
    try:
        a.release()

        assert redis.get(keys.lease(b.step_id)) == b.token.encode()
        assert redis.zscore(keys.leases, b.step_id) is not None
        assert redis.hget(keys.dispatch, b.step_id) is not None
    finally:
        b.release()
    assert redis.zscore(keys.leases, b.step_id) is None


def test_releasing_an_expired_lease_clears_its_entry(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    kill(held)
    held.release()  # the step finished after all: nothing is left for a watchdog
    assert redis.zscore(keys.leases, held.step_id) is None
    assert Sends().watchdog(redis, keys).sweep() == 0


# -- watchdog -------------------------------------------------------------------------------------


def test_a_live_lease_is_left_alone(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    sends = Sends()
    with held:
        assert sends.watchdog(redis, keys).sweep() == 0
    assert sends.sent == []


def test_an_expired_step_is_sent_again_exactly_once(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    kill(held)
    sends = Sends()
    dog = sends.watchdog(redis, keys)

    assert dog.sweep() == 1
    assert dog.sweep() == 0  # the claim holds the entry while the re-sent step starts
    assert sends.sent == [DISPATCH]
    assert int(redis.hget(keys.takeovers, held.step_id) or 0) == 1


def test_two_racing_watchdogs_send_once(
    redis: Redis, keys: LeaseKeys, new_client: Callable[[], Redis]
) -> None:
    for i in range(5):
        held = lease(redis, keys, step=f"job:tool:{i}")
        assert held.acquire()
        kill(held)
    sends = Sends()
    dogs = [sends.watchdog(new_client(), keys) for _ in range(2)]
    barrier = threading.Barrier(len(dogs))
    counts: list[int] = []

    def sweep(dog: Watchdog) -> None:
        barrier.wait(timeout=10)
        counts.append(dog.sweep())

    threads = [threading.Thread(target=sweep, args=(dog,)) for dog in dogs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(counts) == 5 and len(sends.sent) == 5  # each of the five steps, once


def test_the_watchdog_gives_up_after_max_takeovers(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    kill(held)
    sends = Sends()
    dog = sends.watchdog(redis, keys, max_takeovers=2)

    assert dog.sweep() == 1  # takeover 1
    expire(redis, keys, held.step_id)  # the re-sent step died too
    assert dog.sweep() == 1  # takeover 2
    expire(redis, keys, held.step_id)
    assert dog.sweep() == 0  # a third would exceed max_takeovers

    assert len(sends.sent) == 2
    assert sends.given_up == [(held.step_id, DISPATCH)]
    assert redis.zscore(keys.leases, held.step_id) is None
    assert dog.sweep() == 0 and len(sends.given_up) == 1


def test_a_step_without_its_dispatch_is_dropped(redis: Redis, keys: LeaseKeys) -> None:
    redis.zadd(keys.leases, {"orphan": 0})
    sends = Sends()
    assert sends.watchdog(redis, keys).sweep() == 0
    assert sends.sent == [] and sends.given_up == []
    assert redis.zscore(keys.leases, "orphan") is None


def test_a_started_watchdog_sweeps_on_its_own(redis: Redis, keys: LeaseKeys) -> None:
    held = lease(redis, keys)
    assert held.acquire()
    kill(held)
    sends = Sends()
    dog = Watchdog(redis, keys, 0.6, sends.send, sends.give_up)
    dog.start()
    try:
        assert sends.any_sent.wait(timeout=30)
    finally:
        dog.stop()
    assert sends.sent[0] == DISPATCH
