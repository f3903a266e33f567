"""The worker's Redis pool blocks (up to a timeout) instead of raising "Too many connections"."""

from __future__ import annotations

import threading

import pytest
from redis import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.broker_config import Settings
from tandem.tasks.runtime import POOL_SPARE, Runtime
from tandem.workers.embedded import redis_answers

URL = "redis://127.0.0.1:6379/0"


def test_the_pool_is_sized_to_the_workers_threads() -> None:
    rt = Runtime(Settings(), concurrency=200)
    assert rt.pool_size == 2 * 200 + POOL_SPARE
    pool = rt.redis.connection_pool
    assert isinstance(pool, BlockingConnectionPool)
    assert pool.max_connections == 408
    assert pool.timeout == 20.0


def test_the_pool_size_and_wait_can_be_set() -> None:
    rt = Runtime(Settings.from_env({"TANDEM_REDIS_MAX_CONNECTIONS": "7", "TANDEM_REDIS_POOL_TIMEOUT": "3"}))
    assert rt.pool_size == 7
    assert rt.redis.connection_pool.max_connections == 7  # type: ignore[attr-defined]
    assert rt.redis.connection_pool.timeout == 3.0  # type: ignore[attr-defined]


@pytest.mark.integration
def test_more_threads_than_connections_wait_their_turn() -> None:
    if not redis_answers(URL):
        pytest.skip("no Redis at 127.0.0.1:6379")
    rt = Runtime(Settings.from_env({"TANDEM_REDIS_URL": URL, "TANDEM_REDIS_MAX_CONNECTIONS": "2"}))
    errors: list[BaseException] = []
    done: list[int] = []

    def hold_a_connection() -> None:
        try:
            rt.redis.blpop(["tandem-test-pool-never-filled"], timeout=0.1)  # holds it ~0.1 s
            done.append(1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hold_a_connection) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(done) == 20  # 20 threads, 2 connections: all waited, none failed


@pytest.mark.integration
def test_a_thread_that_waits_past_the_timeout_gets_a_clear_error() -> None:
    if not redis_answers(URL):
        pytest.skip("no Redis at 127.0.0.1:6379")
    pool = BlockingConnectionPool.from_url(URL, max_connections=1, timeout=0.2)
    client = Redis(connection_pool=pool)
    held = pool.get_connection()
    try:
        with pytest.raises(RedisConnectionError, match="No connection available"):
            client.ping()
    finally:
        pool.release(held)
        pool.disconnect()


def test_a_worker_sizes_both_pools_to_its_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tandem.tasks import runtime, worker_signals
    from tandem.tasks.app import app
    from tandem.tasks.runtime import get_runtime

    previous = app.conf.redis_max_connections
    monkeypatch.setattr(runtime, "_runtime", Runtime(Settings()))
    try:
        app.conf.redis_max_connections = None
        worker_signals._size_redis_pool(sender=SimpleNamespace(concurrency=200))
        assert get_runtime().pool_size == 408
        assert app.conf.redis_max_connections == 408  # Celery's result backend pool too
    finally:
        app.conf.redis_max_connections = previous
