"""Bare clients get every job's result, whatever happened to the result backend as the jobs ended.

The result backend here is a redis-server of the test's own, apart from the job store (so the
finish script cannot write it: the job keeps a ``deliver`` mark and stays in the reconciler's
index until its Celery result is stored). A bare Celery client (broker and backend URLs only)
sends the jobs by name and waits with ``AsyncResult.get``, as any service would.

- The backend is down for 12 s while the jobs end: every client gets its result once it is back.
- The backend hangs (SIGSTOP) while a job ends, and the worker that ended the job is SIGKILLed
  while it waits on it: another worker's reconciler stores the result once the backend answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from celery import Celery

from tests.integration.chaos import OwnRedis
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
PLAN = [[{"name": "add", "args": {"a": 40, "b": 2}}]]


@pytest.fixture
def backend() -> Iterator[OwnRedis]:
    server = OwnRedis(appendonly=False).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def split(redis_base: str, backend: OwnRedis) -> Iterator[Hosts]:
    """A cluster whose result backend is ``backend``, apart from the job store and the broker."""
    with _exclusive_db() as db:
        yield from _cluster_on(
            f"{redis_base}/{db}", TANDEM_RESULT_BACKEND=f"{backend.base}/0", TANDEM_LEASE_SECONDS="4"
        )


def _bare_client(cluster: Cluster, backend: OwnRedis) -> Celery:
    client = Celery(broker=cluster.url, backend=f"{backend.base}/0")
    client.conf.redis_socket_timeout = 120  # the client rides out the backend's pause
    return client


def _ended(cluster: Cluster, ids: list[str]) -> bool:
    return all(cluster.store.result(i) is not None for i in ids)


def _wait(predicate, timeout: float = EVENT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _indexed(cluster: Cluster, job_id: str) -> bool:
    machine = cluster.store.machine
    return cluster.redis.zscore(machine.shard_key(machine.shard_of(job_id)), job_id) is not None


def test_bare_clients_get_results_of_jobs_that_ended_while_the_backend_was_down(
    split: Hosts, backend: OwnRedis
) -> None:
    cluster, _, _ = split
    cluster.start("thinker", "actor", "tools")
    client = _bare_client(cluster, backend)
    sent = [
        client.send_task("tandem.infer", kwargs={"spec": {"goal": goal_with_plan(f"bare {i}", PLAN)}})
        for i in range(10)
    ]
    ids = [r.id for r in sent]
    assert backend.process is not None
    down_at = time.monotonic()
    backend.process.terminate()  # the backend is down while the jobs end
    backend.process.wait(10)
    _wait(lambda: _ended(cluster, ids))
    for job_id in ids:  # ended, their Celery results not out yet: still indexed, marked
        assert cluster.store.machine.record(job_id)["deliver"], job_id
        assert _indexed(cluster, job_id)
    time.sleep(max(12 - (time.monotonic() - down_at), 0))
    backend.start()
    for r in sent:
        result = r.get(timeout=RESULT_SECONDS)
        assert (result["job_id"], result["status"]) == (r.id, "completed"), result
    _wait(lambda: not any(_indexed(cluster, i) for i in ids), EVENT_SECONDS)
    assert all(cluster.store.machine.record(i)["deliver"] == "" for i in ids)
    assert cluster.exited() == []


def test_a_worker_killed_between_the_end_and_the_result(split: Hosts, backend: OwnRedis) -> None:
    cluster, _, _ = split
    doomed = cluster.start("actor", name="doomed")  # ends the job (finalize runs in its thread)
    cluster.start("thinker", "tools", name="others")  # their reconcilers take over
    client = _bare_client(cluster, backend)
    slow = [[{"name": "sleep_tool", "args": {"seconds": 3}}]]
    sent = client.send_task("tandem.infer", kwargs={"spec": {"goal": goal_with_plan("killed", slow)}})
    backend.pause()  # the backend hangs as the job ends: the delivery waits on it in the actor's thread
    try:
        _wait(lambda: _ended(cluster, [sent.id]))
        assert cluster.store.machine.record(sent.id)["deliver"]
        time.sleep(1)
        cluster.kill(doomed, "actor")
    finally:
        backend.resume()
    result = sent.get(timeout=RESULT_SECONDS)
    assert (result["job_id"], result["status"]) == (sent.id, "completed"), result
    _wait(lambda: not _indexed(cluster, sent.id), EVENT_SECONDS)
    assert cluster.exited() == []
