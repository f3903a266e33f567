"""Fixtures of the state-machine tests: a ``JobMachine`` on fakeredis and on the real Redis."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import fakeredis
import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.runtime import Runtime
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.store import JobStore
from tests.tasks.slots import SlotCheckingRedis

REAL_REDIS_URL = "redis://127.0.0.1:6379/8"


def real_redis() -> Redis:
    """The real Redis of the unit tests (db 8): skipped when absent locally, required in CI."""
    client = Redis.from_url(REAL_REDIS_URL)
    try:
        client.ping()
    except RedisConnectionError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Redis answers at {REAL_REDIS_URL}: CI needs one")
        pytest.skip(f"no Redis answers at {REAL_REDIS_URL}")
    return client


@pytest.fixture(params=["fakeredis", "redis", "slots"])
def machine(request: pytest.FixtureRequest) -> Iterator[JobMachine]:
    """A ``JobMachine`` under a fresh key prefix, on fakeredis (with Lua), on the real Redis, and on
    fakeredis with Redis Cluster's one-slot rule (``tests.tasks.slots``)."""
    if request.param == "slots":
        redis: Redis = SlotCheckingRedis()
    else:
        redis = fakeredis.FakeRedis() if request.param == "fakeredis" else real_redis()
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    yield JobStore(redis, prefix=prefix, ttl=600).machine
    for key in redis.scan_iter(match=f"{prefix}:*"):
        redis.delete(key)


@pytest.fixture
def spans() -> Iterator[object]:
    """tandem's tracing installed on an in-memory exporter (the spans a test reads), uninstalled after."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tandem.reasoner import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.uninstall()


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    """The process's runtime, with default settings, over fakeredis."""
    runtime = Runtime(Settings())
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime
