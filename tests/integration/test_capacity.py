"""Fleet-wide model-host capacity with real workers: three Actor workers with more threads than
the host takes never overrun it, a step waiting for a slot is woken by the slot (never by its
countdown copy), a 429 storm backs the whole fleet off with one probe per window, and a host's
``Retry-After`` longer than ``TANDEM_RETRY_HOLD_SECONDS`` parks the step instead of its thread."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tandem.tasks.hosts.capacity import HostLimits, snapshot
from tandem.tasks.hosts.rate_buckets import GRACE, bucket
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster, actor_host
from tests.integration.slow_link import SlowLink
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

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
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
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


def test_a_slot_freed_while_a_slow_worker_parks_its_step_wakes_the_step(redis_base: str) -> None:
    """The lost wake-up, arranged with real workers: one slot, held by job A's call on worker F;
    job B's step runs on worker S, whose Redis is 0.4 s away each way. As soon as B's step is
    registered as a waiter, A's call ends: F frees the slot and sends B's wake-up, which reaches
    Redis long before S's next command. Registered before its park (as it was), B's step was still
    claimed by S, the wake-up was dropped, and B waited for its countdown copy (400-600 s with
    these leases): it would not finish here. Registered once parked, the wake-up runs B at once."""
    gen = _make_cluster(redis_base, TANDEM_ACTOR_MAX_IN_FLIGHT="1", TANDEM_LEASE_SECONDS="600")
    cluster, _thinker, actor = next(gen)
    gate = threading.Event()

    def host(request: RecordedRequest) -> Reply:
        if "job-a" in json.dumps(request["messages"]):
            gate.wait(90)  # A's call holds the only slot until the test lets it end
        return actor_host(request)

    url = urlsplit(cluster.url)
    link = SlowLink((url.hostname or "127.0.0.1", url.port or 6379), delay=0.4).start()
    try:
        actor.set_script(host)
        cluster.start("actor", concurrency={"actor": 1}, name="fast")
        a = cluster.submit(goal="job-a: answer", reasoner="mono")
        deadline = time.monotonic() + RESULT_SECONDS
        while actor.in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert actor.in_flight == 1, "A's call never reached the host"
        slow_redis = urlunsplit(url._replace(netloc=f"127.0.0.1:{link.port}"))
        cluster.start("actor", concurrency={"actor": 1}, name="slow", TANDEM_REDIS_URL=slow_redis)
        b = cluster.submit(goal="job-b: answer", reasoner="mono")
        limits = HostLimits(actor.url, 1)
        deadline = time.monotonic() + RESULT_SECONDS
        while snapshot(cluster.redis, cluster.settings.prefix, limits).waiting < 1:
            assert time.monotonic() < deadline, "B's step never waited for the slot"
            time.sleep(0.005)
        gate.set()  # A's call ends now: its worker frees the slot and wakes B
        assert a.result(timeout=RESULT_SECONDS).status == "completed"
        assert b.result(timeout=RESULT_SECONDS).status == "completed"
        waited = [e for e in cluster.store.events(b.id, timeout=5) if e["type"] == "waiting"]
        assert [e["data"]["reason"] for e in waited] == ["in_flight"]
    finally:
        gate.set()
        gen.close()  # the workers stop before the slow worker's link to Redis goes
        link.stop()


def test_under_load_every_waiting_step_is_woken_by_a_slot_not_by_its_countdown(redis_base: str) -> None:
    """80 jobs, 48 threads, 8 slots (the load the lost wake-up was seen under). With leases of
    600 s a step's countdown copy comes 400-600 s after it parks, long after this test's timeout,
    so every job can finish only through wake-ups: a lost one fails the test instead of costing
    its job half a minute. (The gap itself is arranged, not hoped for, in the test above.)"""
    slots, jobs = 8, 80
    gen = _make_cluster(redis_base, TANDEM_ACTOR_MAX_IN_FLIGHT=str(slots), TANDEM_LEASE_SECONDS="600")
    cluster, _thinker, actor = next(gen)
    try:
        actor.latency = 0.2
        for n in range(3):
            cluster.start("actor", concurrency={"actor": 16}, name=f"wake{n}")
        handles = [cluster.submit(goal=f"woken {i}", reasoner="mono") for i in range(jobs)]
        deadline = time.monotonic() + 360  # under the countdown copies' 400 s, generous for a loaded machine
        results = [h.result(timeout=max(1.0, deadline - time.monotonic())) for h in handles]
        assert [r.status for r in results] == ["completed"] * jobs, [r.error for r in results]
        waits = [e for h in handles for e in cluster.store.events(h.id, timeout=5) if e["type"] == "waiting"]
        assert waits, "48 threads against 8 slots: steps must have waited"
        assert {e["data"]["reason"] for e in waits} == {"in_flight"}
        snap = snapshot(cluster.redis, cluster.settings.prefix, HostLimits(actor.url, slots))
        assert (snap.in_flight, snap.waiting) == (0, 0)
        assert actor.in_flight_max <= slots and actor.rejected == 0
    finally:
        gen.close()


def test_a_429_storm_backs_the_fleet_off_with_one_probe_per_window(
    capped: tuple[Cluster, OpenAIServer],
) -> None:
    cluster, actor = capped
    # every request refused for 4 s from the first one on, asking for 1.5 s of quiet
    actor.storm(4.0, retry_after=1.5, from_next_request=True)
    started = time.time()
    handles = [cluster.submit(goal=f"storm {i}", reasoner="mono") for i in range(8)]
    status_seen = None
    deadline = time.monotonic() + RESULT_SECONDS  # or until every job ended without being seen waiting
    while status_seen is None and time.monotonic() < deadline:
        if all(cluster.store.result(h.id) is not None for h in handles):
            break
        for h in handles:
            status = h.status()
            if status.waiting is not None and status.waiting.reason in ("backoff", "probe"):
                status_seen = status
                break
        time.sleep(0.05)
    results = [h.result(timeout=RESULT_SECONDS) for h in handles]
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
    """One slot; its holder is SIGKILLed mid-call: the slot's lease (2 s, on Redis's clock) runs
    out, both jobs finish."""
    gen = _make_cluster(redis_base, TANDEM_ACTOR_MAX_IN_FLIGHT="1", TANDEM_LEASE_SECONDS="2")
    cluster, _thinker, actor = next(gen)
    try:
        actor.latency = 3.0
        doomed = cluster.start("actor", concurrency={"actor": 2}, name="doomed")
        first = cluster.submit(goal="first", reasoner="mono")
        deadline = time.monotonic() + RESULT_SECONDS
        while actor.in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert actor.in_flight == 1
        cluster.kill(doomed, "actor")  # dies holding the only slot
        [slots] = cluster.redis.scan_iter(f"{cluster.settings.prefix}:cap:*:slots")
        [(_token, expiry)] = cluster.redis.zrange(slots, 0, -1, withscores=True)
        seconds, micros = cluster.redis.time()
        assert expiry - (seconds + micros / 1e6) <= 2.0  # the dead holder's slot runs out within a lease
        second = cluster.submit(goal="second", reasoner="mono")
        cluster.start("actor", concurrency={"actor": 2}, name="survivor")
        assert first.result(timeout=RESULT_SECONDS).status == "completed"
        assert second.result(timeout=RESULT_SECONDS).status == "completed"
    finally:
        gen.close()


def test_a_long_retry_after_parks_the_step_and_frees_its_thread(redis_base: str) -> None:
    """No capacity limits; one Actor thread. The host answers job A's call 429 with
    ``Retry-After: 10``, over the hold (5 s): A's step parks (a ``waiting`` event) and the only
    thread runs job B meanwhile. Held in the call (before: up to 30 s), B waited behind A."""
    gen = _make_cluster(redis_base, TANDEM_RETRY_HOLD_SECONDS="5")
    cluster, _thinker, actor = next(gen)
    refused: list[float] = []

    def host(request: RecordedRequest) -> Reply:
        if "slow-job" in json.dumps(request["messages"]) and not refused:
            refused.append(time.time())
            return Reply(status=429, headers={"Retry-After": "10"})
        return actor_host(request)

    try:
        actor.set_script(host)
        cluster.start("actor", concurrency={"actor": 1}, name="single")
        a = cluster.submit(goal="slow-job: answer", reasoner="mono")
        deadline = time.monotonic() + RESULT_SECONDS
        while not refused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refused, "the host never saw job A's call"
        b = cluster.submit(goal="quick job: answer", reasoner="mono")
        assert b.result(timeout=RESULT_SECONDS).status == "completed"
        assert a.result(timeout=RESULT_SECONDS).status == "completed"
        ended = {h.id: cluster.store.status(h.id).updated_at for h in (a, b)}  # type: ignore[union-attr]
        assert ended[b.id] < ended[a.id], "B ran while A's step waited out the host's Retry-After"
        [waiting] = [e for e in cluster.store.events(a.id, timeout=5) if e["type"] == "waiting"]
        assert waiting["data"]["reason"] == "the model host"
        assert "429" in waiting["data"]["error"] and "retry_hold" in waiting["data"]["error"]
        assert refused[0] + 9.5 <= waiting["data"]["until"] <= refused[0] + 15  # parked for its Retry-After
        assert not [e for e in cluster.store.events(b.id, timeout=5) if e["type"] == "waiting"]
    finally:
        gen.close()


def test_a_request_budget_paces_a_burst_of_jobs(redis_base: str) -> None:
    """``TANDEM_ACTOR_RPM=60`` and 8 jobs at once: the host gets about one request a second (the
    burst is one request), not the 8 at once a minute's worth of budget would let through.

    Checked against the budget's own bound, not a window of the host's clock: over any ``T``
    seconds a budget grants fewer than ``burst + rate × (T + GRACE)`` calls
    (``tandem.tasks.hosts.rate_buckets``), so its ``k``-th grant comes more than
    ``(k - burst) / rate - GRACE`` seconds after its first, which comes after the submission, and
    a call reaches the host after its grant. A loaded machine delivers calls later still, never
    sooner: only a budget that let calls through too early can fail this."""
    gen = _make_cluster(redis_base, TANDEM_ACTOR_RPM="60")
    cluster, _thinker, actor = next(gen)
    try:
        cluster.start("actor", concurrency={"actor": 8}, name="paced")
        submitted = time.monotonic()  # the host's ``received_at`` is this process's monotonic clock
        handles = [cluster.submit(goal=f"paced {i}", reasoner="mono") for i in range(8)]
        results = [h.result(timeout=RESULT_SECONDS) for h in handles]
        assert [r.status for r in results] == ["completed"] * 8, [r.error for r in results]

        received = sorted(r.received_at - submitted for r in actor.requests)
        assert len(received) == 8, received  # one call per job
        shape = bucket(60, cluster.settings.rate_burst_seconds, whole=True)  # burst 1, 0.99 a second
        earliest = [(k - shape.burst) / shape.rate - GRACE for k in range(1, 9)]
        assert all(got > bound for got, bound in zip(received, earliest, strict=True)), [
            (round(got, 2), round(bound, 2)) for got, bound in zip(received, earliest, strict=True)
        ]
        waits = [e for h in handles for e in cluster.store.events(h.id, timeout=5) if e["type"] == "waiting"]
        assert {e["data"]["reason"] for e in waits} <= {"rpm"}, waits  # they waited for the budget only
    finally:
        gen.close()
