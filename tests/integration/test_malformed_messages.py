"""A malformed broker message harms nothing: it is logged and dead-lettered (or rejected by
Celery), the worker that took it lives, and the jobs around it complete.

Messages are pushed raw onto the Redis lists the workers consume (``celery``, ``thinker``,
``actor``, ``tools``), as a buggy or hostile client could: not JSON, JSON that is not a kombu
envelope, an envelope whose body kombu cannot decode, and well-formed Celery messages with the
wrong arguments.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tandem.broker_config.transport import DEAD_LETTER_EXCERPT
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster
from tests.integration.plan_model import goal_with_plan
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
QUEUES = ("celery", "thinker", "actor", "tools")
MALFORMED: list[tuple[str, bytes, str]] = [
    ("not-json", b"this is not json {", "not JSON"),
    ("json-string", b'"just a string"', "a JSON str, not an object"),
    ("json-list", b"[1, 2, 3]", "a JSON list, not an object"),
    ("no-properties", json.dumps({"body": "e30=", "headers": {}}).encode(), "no 'properties' object"),
    ("no-delivery-tag", json.dumps({"body": "", "properties": {}}).encode(), "no 'properties.delivery_tag'"),
    (
        "no-routing-key",
        json.dumps({"body": "", "properties": {"delivery_tag": "t", "delivery_info": {}}}).encode(),
        "no 'properties.delivery_info' with 'exchange' and 'routing_key'",
    ),
    (
        "bad-base64-body",
        json.dumps(
            {
                "body": "%%% not base64 %%%",
                "content-type": "application/json",
                "content-encoding": "utf-8",
                "headers": {"task": "tandem.thinker_turn", "id": "x", "argsrepr": "", "kwargsrepr": ""},
                "properties": {
                    "delivery_tag": str(uuid.uuid4()),
                    "body_encoding": "base64",
                    "delivery_info": {"exchange": "", "routing_key": "celery"},
                },
            }
        ).encode(),
        "Error",
    ),
    (
        "v1-body-without-id",
        json.dumps(
            {
                "body": "eyJ0YXNrIjogMX0=",  # base64 of {"task": 1}: Celery's report of it raised KeyError
                "content-type": "application/json",
                "content-encoding": "utf-8",
                "headers": {},
                "properties": {
                    "delivery_tag": str(uuid.uuid4()),
                    "body_encoding": "base64",
                    "delivery_info": {"exchange": "", "routing_key": "celery"},
                },
            }
        ).encode(),
        "KeyError",
    ),
]


def _dead_letters(cluster: Cluster) -> list[dict]:
    return [json.loads(x) for x in cluster.redis.lrange(f"{cluster.settings.prefix}:dead-letters", 0, -1)]


def _wait_for(predicate, timeout: float = EVENT_SECONDS) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_malformed_messages_on_every_queue_are_dead_lettered_and_no_worker_dies(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    key = f"{cluster.settings.prefix}:dead-letters"
    cluster.redis.delete(key)
    for queue in QUEUES:
        for _, raw, _ in MALFORMED:
            cluster.redis.lpush(queue, raw)
    expected = len(QUEUES) * len(MALFORMED)
    _wait_for(lambda: cluster.redis.llen(key) >= expected)
    letters = _dead_letters(cluster)
    assert len(letters) == expected
    assert sorted({d["queue"] for d in letters}) == sorted(QUEUES)
    for name, raw, reason in MALFORMED:
        mine = [d for d in letters if d["message"] == raw.decode()[:DEAD_LETTER_EXCERPT]]
        assert len(mine) == len(QUEUES), name
        assert all(reason in d["reason"] for d in mine), (name, mine)
    assert 0 < cluster.redis.ttl(key) <= 7 * 86400
    assert cluster.exited() == []
    # The workers that took them go on taking jobs.
    handle = cluster.submit(
        goal=goal_with_plan("after garbage", [[{"name": "add", "args": {"a": 1, "b": 2}}]])
    )
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert cluster.exited() == []


def test_messages_with_wrong_arguments_change_nothing_and_no_worker_dies(dual_cluster: Hosts) -> None:
    cluster, _, _ = dual_cluster
    handle = cluster.submit(
        goal=goal_with_plan("bystander", [[{"name": "sleep_tool", "args": {"seconds": 1}}]])
    )
    _wait_for(
        lambda: (handle.status().step or "") in ("tools", "collect") or handle.status().state != "running"
    )
    wrong = [
        ("tandem.thinker_turn", [], {}),  # no job id, no round
        ("tandem.thinker_turn", [handle.id], {}),  # no round
        ("tandem.actor_turn", [handle.id, "not a round"], {}),
        ("tandem.run_tool", [handle.id], {"index": "x"}),
        ("tandem.run_tool", [[1, 2], {"a": 1}, None], {}),
        ("tandem.collect_tools", [None, None], {}),
        ("tandem.finalize", [handle.id, 99], {}),
        ("tandem.infer", [], {"spec": "not a spec"}),
        ("tandem.infer", [], {"nonsense": 1}),
        ("tandem.decide", [], {"job_id": handle.id, "decisions": "yes"}),
        ("tandem.no_such_task", [1], {}),
    ]
    for name, args, kwargs in wrong:
        cluster.app.send_task(name, args=args, kwargs=kwargs, ignore_result=True)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed" and result.rounds == 2, result
    _wait_for(lambda: all(cluster.redis.llen(queue) == 0 for queue in QUEUES), EVENT_SECONDS)  # all taken
    assert cluster.exited() == []
    after = cluster.submit(goal=goal_with_plan("after wrong", [[{"name": "add", "args": {"a": 2, "b": 2}}]]))
    assert after.result(timeout=RESULT_SECONDS).status == "completed"
