"""A job's durable end: the result, the ``final`` event and the Celery result go out together.

On fakeredis and the real Redis (``machine`` fixture): the finish script writes the Celery result
itself when the backend is the store (``CeleryWrite.key``), or leaves a ``deliver`` mark that keeps
the job in the reconciler's index until the result is stored (``CeleryWrite.mark``).
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from redis.exceptions import NoPermissionError

from tandem.tasks.spec import JobResult
from tandem.tasks.state.claims import CeleryWrite, FinalEntry, Reconciled
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.reconciler import DELIVERY_RETRY, Reconciler
from tandem.tasks.state.results import ResultDelivery, celery_meta, client_address, end_job, redis_address

JOB = "job-1"


def create(machine: JobMachine) -> None:
    assert machine.create(JOB, '{"goal": "g"}', "dual", (0, "thinker"), [], timeout=3600, ttl_after=600)
    machine.index(JOB, time.time() - 1, 3600)


def finals(machine: JobMachine) -> list[dict[str, Any]]:
    entries = machine.redis.xrange(machine.store.key(JOB, "events"))
    return [json.loads(f[b"data"]) for _, f in entries if f[b"type"] == b"final"]


def test_the_finish_script_writes_the_final_event_and_the_celery_result(machine: JobMachine) -> None:
    from tests.tasks.slots import SlotCheckingRedis

    if isinstance(machine.redis, SlotCheckingRedis):
        pytest.skip("one Redis only: on a cluster the result goes through the deliver mark")
    create(machine)
    key = f"{machine.store.prefix}:celery-task-meta-{JOB}"
    write = CeleryWrite(key=key, value='{"status": "SUCCESS"}', expires=120)
    final = FinalEntry(json.dumps({"job_id": JOB, "status": "completed"}), "1.0")
    assert machine.finish(JOB, '{"status": "completed"}', "completed", "", 60, final=final, celery=write)
    assert machine.redis.get(key) == b'{"status": "SUCCESS"}'
    assert 100 < machine.redis.ttl(key) <= 120  # the backend's expiry, not the job's
    assert finals(machine) == [{"job_id": JOB, "status": "completed"}]
    # A second end stores nothing: no second final event, the Celery result unchanged.
    other = CeleryWrite(key=key, value='{"status": "OTHER"}', expires=120)
    assert not machine.finish(JOB, '{"status": "failed"}', "failed", "x", 60, celery=other)
    assert machine.redis.get(key) == b'{"status": "SUCCESS"}'
    assert len(finals(machine)) == 1
    assert machine.record(JOB).get("deliver", "") == ""


def test_a_mark_keeps_the_job_for_the_reconciler_until_the_result_is_out(machine: JobMachine) -> None:
    create(machine)
    assert machine.finish(JOB, '{"status": "completed"}', "completed", "", 60, celery=CeleryWrite(mark="m1"))
    assert machine.record(JOB)["deliver"] == "m1"
    assert machine.reconcile(JOB, 60, 5, 30) == Reconciled("deliver", mark="m1")
    assert not machine.delivered(JOB, "another mark")
    assert machine.reconcile(JOB, 60, 5, 30).action == "deliver"
    assert machine.delivered(JOB, "m1")
    assert machine.reconcile(JOB, 60, 5, 30).action == "gone"


def test_the_reconciler_delivers_and_backs_off_while_the_backend_refuses(machine: JobMachine) -> None:
    create(machine)
    machine.finish(JOB, '{"status": "completed"}', "completed", "", 60, celery=CeleryWrite(mark="m1"))
    calls: list[tuple[str, str]] = []
    up = False

    def deliver(job_id: str, mark: str) -> bool:
        calls.append((job_id, mark))
        if up:
            machine.delivered(job_id, mark)
        return up

    reconciler = Reconciler(
        machine,
        lease_seconds=8,
        stall_seconds=8,
        max_lease_expiries=5,
        resend=print,
        end=print,
        deliver=deliver,
    )
    shard = machine.shard_key(machine.shard_of(JOB))
    reconciler.sweep()
    assert calls == [(JOB, "m1")]
    retry_at = machine.redis.zscore(shard, JOB)  # still indexed, looked at again later
    assert retry_at is not None and retry_at > time.time() + DELIVERY_RETRY - 5
    machine.redis.zadd(shard, {JOB: 0})
    up = True
    reconciler.sweep()
    assert calls == [(JOB, "m1"), (JOB, "m1")]
    assert machine.redis.zscore(shard, JOB) is None  # out of the index once delivered
    assert machine.record(JOB)["deliver"] == ""


def test_end_job_delivers_at_once_or_leaves_the_mark(machine: JobMachine) -> None:
    create(machine)
    stored: dict[str, str] = {}

    class Backend:
        expires = 60
        down = True

        def get_key_for_task(self, job_id: str) -> str:
            return f"celery-task-meta-{job_id}"

        def encode(self, meta: dict[str, Any]) -> str:
            return json.dumps(meta)

        def set(self, key: str, value: str, **_: Any) -> None:
            if self.down:
                raise ConnectionError("backend down")
            stored[key] = value

    backend = Backend()  # a stand-in for Celery's Redis backend, down at first
    delivery = ResultDelivery(SimpleNamespace(backend=backend), in_script=False)  # type: ignore[arg-type]
    result = JobResult(job_id=JOB, status="completed", deliverable="42", rounds=1)
    first, got = end_job(machine.store, result, 60, delivery=delivery)
    assert first and got == result and stored == {}
    mark = machine.record(JOB)["deliver"]
    assert mark and machine.redis.zscore(machine.shard_key(machine.shard_of(JOB)), JOB) is not None
    backend.down = False
    from tandem.tasks.state.results import deliver

    assert deliver(machine.store, delivery, JOB, mark)
    meta = json.loads(stored[f"celery-task-meta-{JOB}"])
    assert (meta["status"], meta["task_id"], meta["result"]) == (
        "SUCCESS",
        JOB,
        result.model_dump(mode="json"),
    )
    assert machine.record(JOB)["deliver"] == ""


@pytest.mark.parametrize(
    ("backend", "store", "same"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", True),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379", True),
        ("redis://:pw@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", True),
        ("redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379/0", False),
        ("redis://127.0.0.1:6380/0", "redis://127.0.0.1:6379/0", False),
        ("redis://other:6379/0", "redis://127.0.0.1:6379/0", False),
        ("rediss://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", False),
        ("redis+socket:///run/redis.sock", "unix:///run/redis.sock", True),
    ],
)
def test_the_backend_is_the_store_when_both_name_one_database(backend: str, store: str, same: bool) -> None:
    from redis import Redis

    assert (redis_address(backend) == client_address(Redis.from_url(store))) is same


def test_the_celery_meta_is_celerys_result_format() -> None:
    meta = celery_meta(JOB, {"status": "completed"})
    assert set(meta) == {"status", "result", "traceback", "children", "date_done", "task_id"}
    assert (meta["status"], meta["task_id"], meta["children"]) == ("SUCCESS", JOB, [])


def test_a_cluster_store_delivers_through_the_mark_even_with_the_backend_on_a_node() -> None:
    """On a Redis Cluster the result key would be in another slot: never written by the script."""
    from celery import Celery
    from redis.cluster import RedisCluster

    from tandem.tasks.state.results import ResultDelivery
    from tandem.tasks.state.store import JobStore

    app = Celery(backend="redis://127.0.0.1:7000/0")
    client = RedisCluster.__new__(RedisCluster)  # no connection: only its type is looked at
    assert ResultDelivery.for_store(app, JobStore(client)).in_script is False  # type: ignore[arg-type]


def test_a_client_that_may_not_write_results_leaves_the_mark_to_the_workers(
    machine: JobMachine, caplog: pytest.LogCaptureFixture
) -> None:
    create(machine)

    class Backend:
        expires = 60

        def get_key_for_task(self, job_id: str) -> str:
            return f"celery-task-meta-{job_id}"

        def encode(self, meta: dict[str, Any]) -> str:
            return json.dumps(meta)

        def set(self, key: str, value: str, **_: Any) -> None:  # the client user of docs/security.md
            raise NoPermissionError(
                f"Command # 1 (SETEX {key} 60 ...) of pipeline caused error: this user has no "
                "permissions to access one of the keys used as arguments"
            )

    delivery = ResultDelivery.for_client(SimpleNamespace(backend=Backend()))  # type: ignore[arg-type]
    assert delivery.in_script is False  # a client never writes the result in the script
    result = JobResult(job_id=JOB, status="cancelled", error="cancelled before it started")
    with caplog.at_level("INFO", logger="tandem.tasks"):
        first, got = end_job(machine.store, result, 60, delivery=delivery)
    assert first and got == result and finals(machine)[0]["status"] == "cancelled"
    assert machine.record(JOB)["deliver"]  # the workers' reconciler stores the Celery result
    assert machine.redis.zscore(machine.shard_key(machine.shard_of(JOB)), JOB) is not None
    [said] = [r for r in caplog.records if JOB in r.getMessage()]
    assert (
        said.levelname == "INFO"
        and "this client's Redis user may not write Celery's results" in said.getMessage()
    )
