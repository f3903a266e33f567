"""Attacks on "A malformed message harms nothing" and on the bare client's result, from the README.

- Hostile messages pushed raw onto every queue while eight jobs run (Redis broker): not JSON, not
  an envelope, bodies kombu cannot decode (bad base64, garbage gzip, a pickle and a YAML payload
  that would run a command if ever loaded), headers Celery's own handling trips on (a task name
  that is a list, a ``timelimit`` that is a number, no ``id``), an unknown task, wrong arguments,
  5 MB of garbage. Every job completes exactly once, no payload runs, the ones the README names
  are dead-lettered, no worker exits.
- A flood of 1,500 malformed messages: ``tandem:dead-letters`` keeps the newest 1,000, with a TTL.
- The job's Celery result (what ``AsyncResult.get()`` reads) against messages that carry the job's
  id: the intake message delivered again (mid-run and after the end, as the README says kombu's
  "unacked" copy comes back), and a message for a task no worker knows.
- RabbitMQ (skipped when none answers): the hostile headers and bodies on every queue; a plain
  Celery client that sends ``tandem.infer`` before any worker has declared a queue.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import Connection

from tandem.client.handle import JobHandle
from tests.integration.breaking import (
    FAST,
    SMALL,
    checked,
    ended,
    logs,
    own_cluster,
    plan_jobs,
    poll,
    rabbitmq_vhost,
)
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, _cluster_on, _exclusive_db
from tests.integration.plan_model import goal_with_plan

pytestmark = pytest.mark.integration

QUEUES = ("celery", "thinker", "actor", "tools")
DEAD_LETTERS = "tandem:dead-letters"
PWNED = "/tmp/tandem-breaking-pwned-{}"
"""A file the hostile pickle and YAML payloads would create if anything ever loaded them."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _body(args: Any = (), kwargs: Any = None) -> bytes:
    return json.dumps(
        [list(args), kwargs or {}, {"callbacks": None, "errbacks": None, "chain": None}]
    ).encode()


def envelope(
    marker: str,
    *,
    task: Any = "tandem.run_tool",
    body: bytes | None = None,
    headers: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
    content_type: str = "application/json",
    body_encoding: str = "base64",
    raw_body: Any = None,
) -> str:
    """A kombu message for a Redis list, with ``marker`` in its headers and properties (first in
    the JSON, so any excerpt holds it)."""
    task_id = str(uuid.uuid4())
    head: dict[str, Any] = {
        "marker": marker,
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "attacker",
        "ignore_result": False,
    }
    head.update(headers or {})
    for key in drop:
        head.pop(key, None)
    message = {
        "headers": head,
        "properties": {
            "correlation_id": marker,
            "reply_to": str(uuid.uuid4()),
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": "tools"},
            "priority": 0,
            "body_encoding": body_encoding,
            "delivery_tag": str(uuid.uuid4()),
        },
        "content-encoding": "utf-8" if content_type.startswith("application/json") else "binary",
        "content-type": content_type,
        "body": raw_body if raw_body is not None else _b64(body if body is not None else _body()),
    }
    return json.dumps(message)


def hostile(tag: str) -> dict[str, list[tuple[str, str]]]:
    """(marker, raw message) pairs by kind: ``dead`` (the README says they are dead-lettered: not
    JSON, not an envelope, an envelope kombu cannot read, headers Celery's handling raises on),
    ``undecodable`` (an envelope whose body kombu cannot decode: not JSON, garbage gzip, a pickle or
    YAML payload that must never be loaded; the README says dead-lettered too), and ``handled``
    (an unknown task, wrong arguments, a bad ``eta``/``expires``: Celery logs and drops them)."""
    m = [f"{tag}-{i:02d}-{uuid.uuid4().hex[:8]}" for i in range(20)]
    pickle_payload = b"cos\nsystem\n(S'touch " + PWNED.format(tag).encode() + b"'\ntR."
    yaml_payload = f'!!python/object/apply:os.system ["touch {PWNED.format(tag)}"]'.encode()
    gzip_header = {"compression": "application/x-gzip"}
    return {
        "dead": [
            (m[0], f"{m[0]} this is not JSON {{"),
            (m[1], json.dumps([m[1], "a list, not an envelope"])),
            (m[2], json.dumps({"marker": m[2], "hello": "not a kombu envelope"})),
            (m[3], envelope(m[3], raw_body="!!! not base64 @@@")),
            (m[8], envelope(m[8], task=["tandem.run_tool"])),  # unhashable: the strategy lookup raises
            (m[9], envelope(m[9], headers={"timelimit": 5})),  # cannot be unpacked into two limits
            (m[10], envelope(m[10], drop=("id",))),
            (m[11], envelope(m[11], raw_body=12345)),
            (m[12], f"{m[12]} " + "x" * 5_000_000),
            (m[13], envelope(m[13], task={"name": "tandem.run_tool"})),
        ],
        "undecodable": [
            (m[4], envelope(m[4], body=b"this body is not JSON {")),
            (m[5], envelope(m[5], body=b"\x1f\x8b garbage, not gzip", headers=gzip_header)),
            (m[6], envelope(m[6], body=pickle_payload, content_type="application/x-python-serialize")),
            (m[7], envelope(m[7], body=yaml_payload, content_type="application/x-yaml")),
            (m[14], envelope(m[14], body=b"gz" + gzip.compress(b"[1, 2"), headers=gzip_header)),
        ],
        "handled": [
            (m[15], envelope(m[15], task="tandem.no_such_task")),
            (m[16], envelope(m[16], body=_body(kwargs={"bogus": 1}))),
            (m[17], envelope(m[17], headers={"eta": "not a date"})),
            (m[18], envelope(m[18], headers={"expires": "never"})),
            (m[19], envelope(m[19], task="tandem.infer", body=_body(kwargs={"spec": "not a spec"}))),
        ],
    }


def dead_letters(redis: Any) -> list[str]:
    return [x.decode(errors="replace") for x in redis.lrange(DEAD_LETTERS, 0, -1)]


def test_hostile_messages_mixed_into_a_live_run_harm_nothing() -> None:
    with own_cluster(FAST) as ((cluster, _, _), _server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        handles = plan_jobs(cluster, 8, "hostile neighbours")
        kinds = hostile("redis")
        messages = kinds["dead"] + kinds["undecodable"] + kinds["handled"]
        for i, (_, raw) in enumerate(messages):  # spread over the run, every queue in turn
            cluster.redis.lpush(QUEUES[i % len(QUEUES)], raw)
            time.sleep(0.3)
        handles += plan_jobs(cluster, 2, "after the hostile messages")
        ended(cluster, handles, RESULT_SECONDS)
        checked(cluster, handles)
        assert cluster.exited() == []
        assert not os.path.exists(PWNED.format("redis")), "a pickle or YAML body was loaded"
        poll(lambda: all(cluster.redis.llen(q) == 0 for q in QUEUES), EVENT_SECONDS, "the queues to drain")
        letters = dead_letters(cluster.redis)
        missing = [marker for marker, _ in kinds["dead"] if not any(marker in x for x in letters)]
        assert missing == [], (missing, letters[:3], logs(cluster, "CRITICAL", "Unrecoverable"))
        assert cluster.redis.ttl(DEAD_LETTERS) > 0


def test_a_body_kombu_cannot_decode_is_dead_lettered() -> None:
    """README: a message "that has a body kombu cannot decode ... is logged with an excerpt, kept
    in the Redis list tandem:dead-letters ... and dropped". Bodies that are not JSON, garbage
    gzip, a pickle and a YAML payload (never loaded), one on each queue."""
    with own_cluster(FAST) as ((cluster, _, _), _server):
        cluster.start("thinker", "actor", "tools", concurrency=SMALL)
        undecodable = hostile("undecodable")["undecodable"]
        for i, (_, raw) in enumerate(undecodable):
            cluster.redis.lpush(QUEUES[i % len(QUEUES)], raw)
        poll(lambda: all(cluster.redis.llen(q) == 0 for q in QUEUES), EVENT_SECONDS, "the queues to drain")
        assert not os.path.exists(PWNED.format("undecodable")), "a pickle or YAML body was loaded"
        handle = cluster.submit(goal="after the undecodable bodies", max_rounds=2)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        letters = dead_letters(cluster.redis)
        missing = [marker for marker, _ in undecodable if not any(marker in x for x in letters)]
        assert missing == [], (missing, logs(cluster, "Can't decode message body"))


def test_a_flood_of_malformed_messages_keeps_the_newest_thousand() -> None:
    with own_cluster(FAST) as ((cluster, _, _), _server):
        cluster.start("tools", concurrency={"tools": 2})
        markers = [f"flood-{i:04d}-{uuid.uuid4().hex[:6]}" for i in range(1500)]
        for start in range(0, len(markers), 100):  # oldest first: each LPUSH goes to the head
            pipe = cluster.redis.pipeline(transaction=False)
            for marker in markers[start : start + 100]:
                pipe.lpush("tools", f"{marker} not JSON, and long: " + "y" * 20_000)
            pipe.execute()
        poll(lambda: cluster.redis.llen("tools") == 0, RESULT_SECONDS, "the flood to be consumed")
        poll(
            lambda: any(markers[-1] in x for x in dead_letters(cluster.redis)),
            EVENT_SECONDS,
            "the last message dead-lettered",
        )
        letters = dead_letters(cluster.redis)
        assert len(letters) == 1000
        kept = {m for m in markers if any(m in x for x in letters)}
        assert kept == set(markers[500:])
        # "up to 4 KB each": a 4 KB excerpt plus the entry's own few fields (queue, reason, time).
        assert max(len(x.encode()) for x in letters) <= 4096 + 512
        assert 0 < cluster.redis.ttl(DEAD_LETTERS) <= 7 * 86400
        handle = cluster.submit(goal="after the flood", reasoner="mono", max_rounds=2)
        cluster.start("actor", concurrency={"actor": 2}, name="after-flood")
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"


def test_a_dead_letter_of_text_that_is_not_ascii_is_kept_within_4_kb() -> None:
    """README: dead letters are kept "up to 4 KB each". Messages of accented letters, emoji and
    bytes that are not UTF-8 (each 20 KB long) must be kept within that bound too, or 1,000 of
    them hold tens of megabytes."""
    with own_cluster(FAST) as ((cluster, _, _), _server):
        cluster.start("tools", concurrency={"tools": 2})
        texts = {
            "accented": ("accented " + "\u00e9" * 20_000).encode(),
            "emoji": ("emoji " + "\U0001f600" * 5_000).encode(),
            "not-utf8": b"not-utf8 " + b"\xff" * 20_000,
        }
        for raw in texts.values():
            cluster.redis.lpush("tools", raw)
        poll(
            lambda: cluster.redis.llen(DEAD_LETTERS) == len(texts),
            EVENT_SECONDS,
            "the messages dead-lettered",
        )
        sizes = {
            name: len(entry)
            for entry in cluster.redis.lrange(DEAD_LETTERS, 0, -1)
            for name in texts
            if name.encode() in entry
        }
        assert set(sizes) == set(texts), sizes
        assert max(sizes.values()) <= 4096 + 512, sizes


def test_messages_carrying_the_job_id_leave_its_celery_result_alone(redis_base: str) -> None:
    """A bare client's ``get()`` must read the JobResult: the intake message delivered again with
    the job's id (mid-run, and after the end, as kombu's "unacked" copy comes back) is a no-op,
    and so is a message for a task no worker knows that carries the job's id."""
    with _exclusive_db() as db:
        url = f"{redis_base}/{db}"
        clusters = _cluster_on(url, **FAST)
        cluster, _, _ = next(clusters)
        try:
            cluster.start("thinker", "actor", "tools", concurrency=SMALL)
            client = Celery(broker=url, backend=url)
            plan = [
                [{"name": "sleep_tool", "args": {"seconds": 1.5}}],
                [{"name": "add", "args": {"a": 2, "b": 3}}],
            ]
            spec = {"goal": goal_with_plan("sent twice", plan), "max_rounds": 6}
            job_id = client.send_task("tandem.infer", kwargs={"spec": spec}).id
            got: dict[str, Any] = {}

            def wait() -> None:
                try:
                    got["first"] = client.AsyncResult(job_id).get(timeout=RESULT_SECONDS)
                except BaseException as exc:
                    got["first"] = exc

            waiter = threading.Thread(target=wait)
            waiter.start()
            poll(lambda: cluster.tool_calls(), EVENT_SECONDS, "the first tool call")
            client.send_task("tandem.infer", kwargs={"spec": spec}, task_id=job_id)  # mid-run
            waiter.join(RESULT_SECONDS + 30)  # the wait ends with the job, or by its own timeout
            handle = JobHandle(job_id, cluster.store, cluster.app)
            ended(cluster, [handle], RESULT_SECONDS)
            final = cluster.store.result(job_id)
            assert final is not None and final.status == "completed"
            assert got["first"] == final.model_dump(mode="json")
            assert [c["name"] for c in cluster.tool_calls()] == ["sleep_tool", "add"]

            client.send_task("tandem.infer", kwargs={"spec": spec}, task_id=job_id)  # after the end
            client.send_task("tandem.no_such_task", kwargs={}, task_id=job_id)
            poll(  # both messages taken and handled (acknowledged: out of kombu's unacked hash too)
                lambda: cluster.redis.llen("celery") == 0 and cluster.redis.hlen("unacked") == 0,
                RESULT_SECONDS,
                "both messages taken and handled",
            )
            meta = cluster.app.backend.get_task_meta(job_id)
            assert (meta["status"], meta["result"]) == ("SUCCESS", final.model_dump(mode="json")), meta
            assert Celery(broker=url, backend=url).AsyncResult(job_id).get(timeout=10) == final.model_dump(
                mode="json"
            )
            assert [c["name"] for c in cluster.tool_calls()] == ["sleep_tool", "add"]
            client.close()
        finally:
            next(clusters, None)


# -- RabbitMQ ----------------------------------------------------------------------------------


@pytest.fixture
def vhost() -> Iterator[str]:
    """A RabbitMQ virtual host of this test, deleted after (skipped without RabbitMQ)."""
    with rabbitmq_vhost() as url:
        yield url


def _publish(amqp: str, queue: str, body: bytes, content_type: str, headers: dict[str, Any] | None) -> None:
    with Connection(amqp) as conn:
        producer = conn.Producer()
        producer.publish(
            body,
            exchange="",
            routing_key=queue,
            content_type=content_type,
            content_encoding="utf-8" if content_type == "application/json" else "binary",
            headers=headers,
            serializer=None,
        )


def _rabbit_queued(amqp: str) -> dict[str, int]:
    """Messages ready or unacknowledged in each queue of the virtual host."""
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "-p", amqp.rsplit("/", 1)[1], "name", "messages"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines() if "\t" in line]
    return {name: int(count) for name, count in rows if count.isdigit()}


def test_hostile_messages_on_rabbitmq_harm_nothing(redis_base: str, vhost: str) -> None:
    with _exclusive_db() as db:
        url = f"{redis_base}/{db}"
        clusters = _cluster_on(url, TANDEM_BROKER_URL=vhost, **FAST)
        cluster, _, _ = next(clusters)
        try:
            cluster.start("thinker", "actor", "tools", concurrency=SMALL)
            handles = plan_jobs(cluster, 4, "rabbit neighbours")
            pwned = PWNED.format("rabbitmq")
            good = _body()
            attacks: list[tuple[bytes, str, dict[str, Any] | None]] = [
                (b"not JSON {", "application/json", {"task": "tandem.run_tool", "id": str(uuid.uuid4())}),
                (
                    b"cos\nsystem\n(S'touch " + pwned.encode() + b"'\ntR.",
                    "application/x-python-serialize",
                    {"task": "tandem.run_tool", "id": str(uuid.uuid4())},
                ),
                (good, "application/json", {"task": ["tandem.run_tool"], "id": str(uuid.uuid4())}),
                (
                    good,
                    "application/json",
                    {"task": "tandem.run_tool", "id": str(uuid.uuid4()), "timelimit": 5},
                ),
                (good, "application/json", {"task": "tandem.run_tool"}),
                (good, "application/json", {"task": 1, "id": str(uuid.uuid4())}),
                (b"not JSON, no headers", "application/json", None),
                (b"[1, 2, 3]", "application/json", None),
                (
                    b"\x1f\x8bxx",
                    "application/json",
                    {"task": "tandem.run_tool", "id": "x", "compression": "application/x-gzip"},
                ),
                (b"not JSON {", "application/json", {"task": "tandem.no_such_task"}),
                (b"z" * 5_000_000, "application/json", {"task": "tandem.run_tool", "id": str(uuid.uuid4())}),
            ]
            for i, (body, content_type, headers) in enumerate(attacks):
                _publish(vhost, QUEUES[i % len(QUEUES)], body, content_type, headers)
                time.sleep(0.3)
            handles += plan_jobs(cluster, 2, "after the rabbit attacks")
            ended(cluster, handles, RESULT_SECONDS)
            checked(cluster, handles)
            assert cluster.exited() == [], logs(cluster, "CRITICAL", "Unrecoverable")
            assert not os.path.exists(pwned), "a pickle body was loaded"
            queued = _rabbit_queued(vhost)
            assert set(QUEUES) <= set(queued) and not any(queued.values()), queued
        finally:
            next(clusters, None)


def test_a_plain_client_on_rabbitmq_before_any_worker_declared_a_queue(redis_base: str, vhost: str) -> None:
    """The README's plain client sends ``tandem.infer`` to a fresh broker (it declares ``celery``
    itself); the workers start after, declare their queues, and run the job; ``get()`` returns it."""
    with _exclusive_db() as db:
        url = f"{redis_base}/{db}"
        clusters = _cluster_on(url, TANDEM_BROKER_URL=vhost, **FAST)
        cluster, _, _ = next(clusters)
        try:
            client = Celery(broker=vhost, backend=url)
            plan = [[{"name": "add", "args": {"a": 20, "b": 22}}]]
            sent = [
                client.send_task(
                    "tandem.infer", kwargs={"spec": {"goal": goal_with_plan(f"early {i}", plan)}}
                )
                for i in range(3)
            ]
            cluster.start("thinker", "actor", "tools", concurrency=SMALL)
            for result in sent:
                answer = result.get(timeout=RESULT_SECONDS)
                assert answer["status"] == "completed" and answer["deliverable"] == "all planned calls ran", (
                    answer
                )
            late = client.send_task("tandem.infer", kwargs={"spec": {"goal": goal_with_plan("late", plan)}})
            assert late.get(timeout=RESULT_SECONDS)["status"] == "completed"
            assert len([c for c in cluster.tool_calls() if c["name"] == "add"]) == 4
            assert cluster.exited() == [], logs(cluster, "PRECONDITION", "CRITICAL")
            client.close()
        finally:
            next(clusters, None)
