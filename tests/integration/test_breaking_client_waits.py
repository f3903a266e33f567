"""Attacks on the README's promises to clients (issue 22), written from the README alone.

- "Client waits ride out a Redis outage": ``events()`` and ``result()`` across two restarts; a hung
  Redis (SIGSTOP) bounds ``status()`` by ``reconnect_call`` and ``result(timeout)`` by its timeout.
- "The job's end is one atomic write ... When the backend is another Redis ... tries again ...
  until the backend takes it": a backend without persistence SIGKILLed while bare clients wait in
  ``AsyncResult.get()`` and the jobs end.

Real ``tandem worker`` processes on a redis-server of their own; a worker exiting by itself fails
the test.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from celery import Celery
from redis import Redis

from tandem.client.handle import JobHandle
from tandem.tasks.errors import JobTimeout, RedisUnavailable
from tandem.tasks.runtime import redis_options
from tandem.tasks.state.store import JobStore
from tests.integration.breaking import (
    FAST,
    SMALL,
    ended,
    logs,
    own_cluster,
    poll,
)
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import runs

pytestmark = pytest.mark.integration


def test_events_and_result_ride_out_two_restarts() -> None:
    """One follower in ``events()`` and one in ``result()`` while Redis restarts twice (AOF, down
    3 s each) mid-job: the follower gets exactly the job's stream, in order, none twice."""
    plan = [[{"name": "sleep_tool", "args": {"seconds": 1.5}}] for _ in range(5)]
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handle = cluster.submit(goal=goal_with_plan("two restarts", plan), max_rounds=8)
        waiter = JobHandle(handle.id, cluster.store, cluster.app, submitted=True)
        got: dict[str, Any] = {}

        def follow() -> None:
            try:
                got["events"] = [(e.id, e.type) for e in handle.events(timeout=RESULT_SECONDS)]
            except BaseException as exc:
                got["events_error"] = exc

        def wait() -> None:
            try:
                got["result"] = waiter.result(timeout=RESULT_SECONDS)
            except BaseException as exc:
                got["result_error"] = exc

        threads = [threading.Thread(target=follow), threading.Thread(target=wait)]
        for t in threads:
            t.start()
        try:
            poll(
                lambda: len(runs(cluster, handle.id, "sleep_tool")) >= 1,
                EVENT_SECONDS,
                "the first round's call",
            )
            server.restart(down_for=3)
            poll(
                lambda: len(runs(cluster, handle.id, "sleep_tool")) >= 3,
                EVENT_SECONDS,
                "the third round's call",
            )
            server.restart(down_for=3)
        finally:
            for t in threads:
                t.join(RESULT_SECONDS + 30)  # each wait ends with the job, or by its own timeout
        assert "events_error" not in got and "result_error" not in got, got
        stream = [(e.id, e.type) for e in cluster.store.read_events(handle.id, count=100_000)]
        assert got["events"] == stream
        assert stream[-1][1] == "final" and [t for _, t in stream].count("final") == 1
        assert got["result"] == cluster.store.result(handle.id)
        assert got["result"].status == "completed", got["result"]


def test_a_hung_redis_bounds_status_and_result_by_their_windows() -> None:
    """Redis hung (SIGSTOP: connections neither answer nor fail) for 40 s. Handles built like the
    product's (``redis_options``: the default 30 s socket timeout) must give up within their
    windows: ``status()`` after ``reconnect_call`` (15 s), or at the first error with
    ``reconnect_call = 0`` (what ``tandem api`` uses to answer 503 "at once"), ``result(timeout=5)``
    after 5 s: with ``RedisUnavailable`` (or ``JobTimeout`` for the wait), long before Redis
    answers again."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handle = cluster.submit(goal="hung redis client", max_rounds=2)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        redis = Redis.from_url(cluster.url, **redis_options(cluster.settings))
        store = JobStore(redis, cluster.settings.prefix)
        client = JobHandle(handle.id, store, cluster.app, submitted=True)
        impatient = JobHandle(handle.id, store, cluster.app, submitted=True)
        impatient.reconnect_call = 0
        assert client.status().state == "completed" and impatient.status().state == "completed"
        outcome: dict[str, tuple[str, float]] = {}

        def timed(name: str, call: Any) -> None:
            started = time.monotonic()
            try:
                call()
                outcome[name] = ("returned", time.monotonic() - started)
            except (RedisUnavailable, JobTimeout) as exc:
                outcome[name] = (type(exc).__name__, time.monotonic() - started)

        threads = [
            threading.Thread(target=timed, args=("status", client.status)),
            threading.Thread(target=timed, args=("status, reconnect_call 0", impatient.status)),
            threading.Thread(target=timed, args=("result(timeout=5)", lambda: client.result(timeout=5))),
        ]
        server.pause()
        try:
            for t in threads:
                t.start()
            time.sleep(40)
        finally:
            server.resume()
        for t in threads:
            t.join(60)
        # Generous bounds (each window plus 10 s of a loaded machine), all far below the 40 s hang.
        assert outcome["status"][0] == "RedisUnavailable" and outcome["status"][1] < 25, outcome
        assert outcome["status, reconnect_call 0"][0] == "RedisUnavailable", outcome
        assert outcome["status, reconnect_call 0"][1] < 10, outcome
        assert outcome["result(timeout=5)"][0] != "returned", outcome
        assert outcome["result(timeout=5)"][1] < 15, outcome


def test_bare_clients_waiting_in_get_through_a_crash_of_a_backend_without_persistence(
    redis_base: str,
) -> None:
    """The result backend is another Redis (no persistence), SIGKILLed while three bare Celery
    clients wait in ``AsyncResult.get()`` and the jobs end, and started again empty 8 s later:
    each ``get()`` returns its job's result, equal to the store's."""
    backend = OwnRedis(appendonly=False).start()
    try:
        with _exclusive_db() as db:
            url = f"{redis_base}/{db}"
            backend_url = f"{backend.base}/0"
            clusters = _cluster_on(url, TANDEM_RESULT_BACKEND=backend_url, **FAST)
            cluster, _, _ = next(clusters)
            try:
                cluster.start("thinker", "actor", "tools", concurrency=SMALL)
                plan = [[{"name": "sleep_tool", "args": {"seconds": 2.0}}]]
                got: dict[int, Any] = {}
                ids: list[str] = []
                clients = [Celery(broker=url, backend=backend_url) for _ in range(3)]
                for i, client in enumerate(clients):
                    spec = {"goal": goal_with_plan(f"bare client {i}", plan), "max_rounds": 4}
                    ids.append(client.send_task("tandem.infer", kwargs={"spec": spec}).id)

                def wait(i: int) -> None:
                    try:
                        got[i] = clients[i].AsyncResult(ids[i]).get(timeout=RESULT_SECONDS)
                    except BaseException as exc:
                        got[i] = exc

                threads = [threading.Thread(target=wait, args=(i,)) for i in range(3)]
                for t in threads:
                    t.start()
                time.sleep(0.5)  # the clients subscribed
                assert backend.process is not None
                backend.process.kill()
                backend.process.wait(10)
                ended(cluster, [JobHandle(i, cluster.store, cluster.app) for i in ids], EVENT_SECONDS)
                time.sleep(8)
                backend.start()
                for t in threads:
                    t.join(RESULT_SECONDS + 30)
                for c in clients:
                    c.close()
                results = [cluster.store.result(job) for job in ids]
                expected = {i: r.model_dump(mode="json") for i, r in enumerate(results) if r is not None}
                assert got == expected, (got, logs(cluster, "deliver", "backend", "result"))
                assert all(r["status"] == "completed" for r in expected.values())
            finally:
                next(clusters, None)
    finally:
        backend.stop()
