"""Attacks on the README's durability promises (issue 22), written from the README alone.

Every test runs real ``tandem worker`` processes on a redis-server of its own (``OwnRedis``),
never the shared one, and fails when a worker exits by itself (the cluster's teardown).

- "Workers outlive every Redis or broker outage ... down for a fraction of a second or for hours":
  Redis down 40 s (longer than Celery's reconnect back-off of up to 30 s), and Redis hung (SIGSTOP)
  for 20 s, ten times the lease, while six jobs hold steps and tool calls.
- "Redis restarts. With append-only persistence a restart loses no job": a restart in the middle
  of a burst of submissions, while workers hold intake messages.
- Parked steps ("No worker thread is held while it waits", "A job awaiting approval holds
  nothing"): a restart while every job waits out a host's Retry-After or a capacity slot, and a
  restart and a crash while jobs await approval.
- "Client waits ride out a Redis outage": ``events()`` and ``result()`` across two restarts; a hung
  Redis (SIGSTOP) bounds ``status()`` by ``reconnect_call`` and ``result(timeout)`` by its timeout.
- "The job's end is one atomic write ... When the backend is another Redis ... tries again ...
  until the backend takes it": a backend without persistence SIGKILLed while bare clients wait in
  ``AsyncResult.get()`` and the jobs end.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from celery import Celery
from redis import Redis

from tandem.tasks.client import JobHandle
from tandem.tasks.errors import JobTimeout, RedisUnavailable
from tandem.tasks.runtime import redis_options
from tandem.tasks.state.store import JobStore
from tests.integration.breaking import (
    FAST,
    SMALL,
    CutLink,
    charges,
    checked,
    ended,
    logs,
    own_cluster,
    plan_jobs,
    poll,
    rabbitmq_vhost,
)
from tests.integration.chaos import OwnRedis
from tests.integration.conftest import _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_durability import runs

pytestmark = pytest.mark.integration


def _jobs_with_charges(cluster: Any, count: int) -> bool:
    return len({c["job"] for c in charges(cluster)}) >= count


def test_every_worker_takes_work_again_after_redis_was_down_40_s() -> None:
    """Down longer than the consumer's longest reconnect wait (30 s): each role has one worker, so
    every job completing proves each came back; a job submitted after the outage completes too."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "long outage")
        poll(lambda: _jobs_with_charges(cluster, 3), 60, "three jobs in their first tool round")
        server.restart(down_for=40)
        handles += plan_jobs(cluster, 1, "after the outage")
        ended(cluster, handles, 110)
        checked(cluster, handles)
        assert cluster.exited() == []


def test_redis_hung_ten_leases_long_while_six_jobs_hold_steps() -> None:
    """SIGSTOP for 20 s (connections hang, nothing is refused) with leases of 2 s: every step and
    tool call under way loses its lease; the reconciler takes them over, the paused holders'
    late commits are fenced, and no ``at_most_once`` call runs twice."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "hung redis")
        poll(lambda: _jobs_with_charges(cluster, 2), 60, "two jobs in their first tool round")
        server.pause()
        time.sleep(20)
        server.resume()
        ended(cluster, handles, 100)
        checked(cluster, handles)


def test_a_restart_in_the_middle_of_a_burst_of_submissions_loses_no_job() -> None:
    """Twelve jobs submitted at once and Redis restarted (AOF, down 2 s) right after the last:
    workers hold intake messages they took, and some are still queued."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 12, "burst")
        server.restart(down_for=2)
        ended(cluster, handles, 110)
        checked(cluster, handles)


@pytest.mark.parametrize("parked_on", ["backoff", "in_flight"])
def test_steps_parked_for_the_model_host_survive_a_restart(parked_on: str) -> None:
    """Every job's Actor step is parked (a 429 with Retry-After 15 s, or a host capped at one call
    in flight with 2 s replies) when Redis restarts: a countdown copy held in a worker's memory is
    dropped with the connection, and the job must still go on once the host answers."""
    env = dict(FAST)
    if parked_on == "in_flight":
        env["TANDEM_ACTOR_MAX_IN_FLIGHT"] = "1"
    with own_cluster(env) as ((cluster, _, actor), server):
        if parked_on == "backoff":  # from the first Actor call: a slow start does not outlast it
            actor.storm(20, retry_after=15, from_next_request=True)
        else:
            actor.latency = 2.0
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 4, f"parked {parked_on}")
        want = 4 if parked_on == "backoff" else 2

        def parked() -> bool:
            states = [h.status() for h in handles]
            return sum(1 for s in states if s.state == "waiting") >= want

        poll(parked, 60, f"{want} jobs parked on {parked_on}")
        seen = {h.id: (h.status().state, h.status().waiting_for) for h in handles}
        server.restart(down_for=2)
        ended(cluster, handles, 110)
        checked(cluster, handles)
        assert any(state == "waiting" for state, _ in seen.values()), seen


def test_jobs_awaiting_approval_outlive_a_restart_and_a_crash() -> None:
    """Three jobs parked awaiting approval (nothing queued for them), Redis restarted, then
    SIGKILLed (AOF ``everysec``, the park long written): each decision then runs its call once."""
    plan = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = [
            cluster.submit(goal=goal_with_plan(f"approval {i}", plan), reasoner="mono", max_rounds=4)
            for i in range(3)
        ]

        def all_parked() -> bool:
            return all(
                h.status().state == "awaiting_approval" and cluster.store.tool_result(h.id, 0, 1)
                for h in handles
            )

        poll(all_parked, 60, "three jobs awaiting approval")
        time.sleep(2)  # appendfsync everysec: the parked records are on disk
        server.restart(down_for=2)
        server.crash(down_for=2)
        for h in handles:
            assert h.status().state == "awaiting_approval"
            assert [(p.index, p.tool) for p in h.status().pending_approval or []] == [(2, "notify")]
        for h in handles:
            h.approve(timeout=60)
        for h in handles:
            result = h.result(timeout=90)
            assert result.status == "completed", result
            assert len(runs(cluster, h.id, "notify")) == 1
            assert len(runs(cluster, h.id, "add")) == 1


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
                got["events"] = [(e.id, e.type) for e in handle.events(timeout=110)]
            except BaseException as exc:
                got["events_error"] = exc

        def wait() -> None:
            try:
                got["result"] = waiter.result(timeout=110)
            except BaseException as exc:
                got["result_error"] = exc

        threads = [threading.Thread(target=follow), threading.Thread(target=wait)]
        for t in threads:
            t.start()
        try:
            poll(lambda: len(runs(cluster, handle.id, "sleep_tool")) >= 1, 60, "the first round's call")
            server.restart(down_for=3)
            poll(lambda: len(runs(cluster, handle.id, "sleep_tool")) >= 3, 60, "the third round's call")
            server.restart(down_for=3)
        finally:
            for t in threads:
                t.join(120)
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
        assert handle.result(timeout=60).status == "completed"
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
                        got[i] = clients[i].AsyncResult(ids[i]).get(timeout=100)
                    except BaseException as exc:
                        got[i] = exc

                threads = [threading.Thread(target=wait, args=(i,)) for i in range(3)]
                for t in threads:
                    t.start()
                time.sleep(0.5)  # the clients subscribed
                assert backend.process is not None
                backend.process.kill()
                backend.process.wait(10)
                ended(cluster, [JobHandle(i, cluster.store, cluster.app) for i in ids], 60)
                time.sleep(8)
                backend.start()
                for t in threads:
                    t.join(110)
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


def _each_event_once(cluster: Any, job_id: str) -> list[str]:
    """What the job's stream holds more than once: a model reply per round and role, a tool call
    per round, index and attempt, a tool result per round and index, the ``final`` event."""
    seen: dict[tuple[Any, ...], int] = {}
    for e in cluster.store.read_events(job_id, count=100_000):
        if e.type == "model_reply":
            key: tuple[Any, ...] = (e.type, e.round, e.role)
        elif e.type == "tool_call":  # once per attempt: a run cut off is announced again
            key = (e.type, e.round, e.index, e.attempt)
        elif e.type == "tool_result":
            key = (e.type, e.round, e.index)
        elif e.type == "final":
            key = (e.type,)
        else:
            continue
        seen[key] = seen.get(key, 0) + 1
    twice = [f"{job_id}: {key} x{n}" for key, n in seen.items() if n != 1]
    return twice + ([] if ("final",) in seen else [f"{job_id}: no final event"])


def test_redis_flapping_six_restarts_in_twelve_seconds() -> None:
    """Six restarts (AOF, down 0.3 s) two seconds apart while ten jobs commit steps and tool
    results with eight tool threads: commits cut off mid-way are retried, none stored twice."""
    with own_cluster(FAST) as ((cluster, _, _), server):
        cluster.start("thinker", "actor", "tools", concurrency={"thinker": 2, "actor": 2, "tools": 8})
        handles = plan_jobs(cluster, 10, "flapping")
        poll(lambda: _jobs_with_charges(cluster, 2), 60, "two jobs in their first tool round")
        for _ in range(6):
            server.restart(down_for=0.3)
            time.sleep(2)
        ended(cluster, handles, 110)
        checked(cluster, handles)
        assert [line for h in handles for line in _each_event_once(cluster, h.id)] == []


def test_a_broker_that_forgets_every_message_loses_no_job(redis_base: str) -> None:
    """The broker is a Redis of its own without persistence (the job store another, untouched):
    restarted mid-run it comes back empty, without a queued step, intake message or kombu binding.
    The reconciler must send every step again and every job complete."""
    broker = OwnRedis(appendonly=False).start()
    try:
        with _exclusive_db() as db:
            clusters = _cluster_on(f"{redis_base}/{db}", TANDEM_BROKER_URL=f"{broker.base}/0", **FAST)
            cluster, _, _ = next(clusters)
            try:
                cluster.start("thinker", "actor", "tools", concurrency=SMALL)
                handles = plan_jobs(cluster, 8, "forgetful broker")
                poll(lambda: _jobs_with_charges(cluster, 2), 60, "two jobs in their first tool round")
                broker.restart(down_for=1)
                ended(cluster, handles, 110)
                checked(cluster, handles)
                assert [line for h in handles for line in _each_event_once(cluster, h.id)] == []
            finally:
                next(clusters, None)
    finally:
        broker.stop()


def test_a_job_store_outage_under_a_rabbitmq_broker() -> None:
    """RabbitMQ carries the messages and the job store (AOF) restarts, down 10 s, mid-run: steps
    delivered meanwhile meet no Redis; every job completes, no worker exits."""
    with (
        rabbitmq_vhost() as amqp,
        own_cluster({**FAST, "TANDEM_BROKER_URL": amqp}) as ((cluster, _, _), server),
    ):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 6, "rabbit store outage")
        poll(lambda: _jobs_with_charges(cluster, 2), 60, "two jobs in their first tool round")
        server.restart(down_for=10)
        ended(cluster, handles, 110)
        checked(cluster, handles)
        assert [line for h in handles for line in _each_event_once(cluster, h.id)] == []


@pytest.mark.parametrize("broker_side", ["reset", "silent"])
def test_a_network_cut_to_rabbitmq(redis_base: str, broker_side: str) -> None:
    """Every connection to RabbitMQ cut, and new ones refused, for 10 s while tool calls run. The
    workers see their connections reset at once; RabbitMQ sees them reset too (``reset``, as when
    it restarts), or, as in a network cut or a worker host's network going away, hears nothing
    (``silent``: it drops them only at its heartbeat timeout). Every worker reconnects, takes
    messages again, and every job completes once."""
    with rabbitmq_vhost() as amqp, _exclusive_db() as db:
        link = CutLink(("127.0.0.1", 5672)).start()
        via_link = amqp.replace("127.0.0.1:5672", f"127.0.0.1:{link.port}")
        try:
            clusters = _cluster_on(f"{redis_base}/{db}", TANDEM_BROKER_URL=via_link, **FAST)
            cluster, _, _ = next(clusters)
            try:
                cluster.start("thinker", "actor", "tools", concurrency=SMALL)
                handles = plan_jobs(cluster, 6, "rabbit cut")

                def calls_under_way() -> bool:  # charge_card records its start, then takes 1.5 s
                    return len([c for c in charges(cluster) if c["start"] > time.time() - 1.0]) >= 2

                poll(calls_under_way, 60, "two charges under way", every=0.02)
                link.cut(silent_server=broker_side == "silent")
                time.sleep(10)
                link.mend()
                ended(cluster, handles, 90)
                checked(cluster, handles)
                assert [line for h in handles for line in _each_event_once(cluster, h.id)] == []
            finally:
                next(clusters, None)
        finally:
            link.stop()
