"""Fleet-wide model-host capacity with real workers: three Actor workers with more threads than
the host takes never overrun it, and a 429 storm backs the whole fleet off with one probe per
window."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest

from tandem.tasks.capacity import HostLimits, snapshot
from tests.integration.conftest import Cluster, _make_cluster
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

CAPACITY = 4
LATENCY = 0.4


@pytest.fixture
def capped(redis_base: str) -> Iterator[tuple[Cluster, OpenAIServer]]:
    """Three Actor workers (6 threads each) against an Actor host that answers 429 above 4."""
    gen = _make_cluster(redis_base, TANDEM_ACTOR_MAX_IN_FLIGHT=str(CAPACITY), TANDEM_LEASE_SECONDS="5")
    cluster, _thinker, actor = next(gen)
    actor.max_concurrency = CAPACITY
    actor.overload_retry_after = 1.0
    actor.latency = LATENCY
    for n in range(3):
        cluster.start("actor", concurrency={"actor": 6}, name=f"cap{n}")
    yield cluster, actor
    gen.close()


def test_the_fleet_never_overruns_the_host(capped: tuple[Cluster, OpenAIServer]) -> None:
    cluster, actor = capped
    handles = [cluster.submit(goal=f"job {i}", reasoner="mono") for i in range(24)]
    results = [h.result(timeout=180) for h in handles]
    assert [r.status for r in results] == ["completed"] * 24, [r.error for r in results]
    assert actor.rejected == 0  # never a 429: no call went beyond the host's capacity
    assert actor.in_flight_max <= CAPACITY
    assert actor.in_flight_max == CAPACITY  # and the capacity was used
    waited = [e for h in handles for e in cluster.store.events(h.id, timeout=5) if e["type"] == "waiting"]
    assert waited, "18 threads against 4 slots: some steps must have waited"
    assert {e["data"]["reason"] for e in waited} == {"in_flight"}
    assert all(e["data"]["host"] == actor.url for e in waited)
    keys = [k for k in cluster.redis.scan_iter("tandem:cap:*")]
    assert keys and all(cluster.redis.ttl(k) > 0 for k in keys)


def test_a_429_storm_backs_the_fleet_off_with_one_probe_per_window(
    capped: tuple[Cluster, OpenAIServer],
) -> None:
    cluster, actor = capped
    # every request refused for 4 s from the first one on, asking for 1.5 s of quiet
    actor.storm(4.0, retry_after=1.5, from_next_request=True)
    started = time.time()
    handles = [cluster.submit(goal=f"storm {i}", reasoner="mono") for i in range(8)]
    status_seen = None
    deadline = time.monotonic() + 30
    while status_seen is None and time.monotonic() < deadline:
        for h in handles:
            status = h.status()
            if status.waiting is not None and status.waiting.reason in ("backoff", "probe"):
                status_seen = status
                break
        time.sleep(0.05)
    results = [h.result(timeout=120) for h in handles]
    assert [r.status for r in results] == ["completed"] * 8, [r.error for r in results]
    assert status_seen is not None and status_seen.waiting is not None  # the status said so
    assert status_seen.waiting.until > started
    assert "back-off window" in status_seen.waiting.detail or "probe" in status_seen.waiting.detail
    # The first wave (at most one call per slot, sent before any 429 came back) meets the storm;
    # after that only probes go, one per window: 4 s of storm in windows of 1.5 s.
    snap = snapshot(cluster.redis, cluster.settings.prefix, HostLimits(actor.url, CAPACITY))
    probes = int(snap.stats["probes"])
    assert 1 <= probes <= math.ceil(4.0 / 1.5) + 1, snap.stats
    assert actor.rejected <= CAPACITY + probes, (actor.rejected, snap.stats)
    assert int(snap.stats["rate_limited"]) == actor.rejected


def test_the_slot_of_a_sigkilled_worker_frees_itself(redis_base: str) -> None:
    """One slot; its holder is SIGKILLed mid-call: the slot's lease runs out, both jobs finish."""
    gen = _make_cluster(redis_base, TANDEM_ACTOR_MAX_IN_FLIGHT="1", TANDEM_LEASE_SECONDS="2")
    cluster, _thinker, actor = next(gen)
    try:
        actor.latency = 3.0
        doomed = cluster.start("actor", concurrency={"actor": 2}, name="doomed")
        first = cluster.submit(goal="first", reasoner="mono")
        deadline = time.monotonic() + 30
        while actor.in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert actor.in_flight == 1
        cluster.kill(doomed, "actor")  # dies holding the only slot
        killed_at = time.monotonic()
        second = cluster.submit(goal="second", reasoner="mono")
        cluster.start("actor", concurrency={"actor": 2}, name="survivor")
        assert first.result(timeout=90).status == "completed"
        assert second.result(timeout=90).status == "completed"
        assert time.monotonic() - killed_at < 60
    finally:
        gen.close()
