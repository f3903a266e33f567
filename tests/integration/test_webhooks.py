"""Job webhooks on real workers (issue 26, item 4): a signed POST for a job's pause for a person and
for its end, retried with back-off from the durable outbox, and never lost to a killed worker.

The receiver is a small HTTP server on 127.0.0.1 in the test. The mono jobs follow a plan of one
``notify`` call (``requires_approval``): the job parks (``waiting_for_person``), is approved, ends
(``final``). The SIGKILL test comes last: it replaces the workers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.errors import JobSpecError
from tandem.tasks.job_events import JobEvent
from tandem.tasks.webhooks.signing import verify
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_decide import any_host
from tests.integration.test_durability import wait_for
from tests.integration.webhook_receiver import Receiver
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
SECRET = "test-webhook-secret-0123456789abcdef"
ENV = {
    "TANDEM_STALL_SECONDS": "2",
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_WEBHOOK_SECRET": SECRET,
    "TANDEM_WEBHOOK_BACKOFF_SECONDS": "0.3",
    "TANDEM_WEBHOOK_TIMEOUT": "3",
}
NOTIFY = [[{"name": "notify", "args": {"to": "ops"}}]]


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, **ENV)
    hosts = next(clusters)
    hosts[2].set_script(any_host)
    hosts[0].start("thinker", "actor", "tools", name="first")
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, url: str, **spec: Any) -> JobHandle:
    goal = goal_with_plan("webhooks", NOTIFY)
    return cluster.submit(goal=goal, reasoner="mono", max_rounds=4, webhooks=[{"url": url}], **spec)


def stream(cluster: Cluster, job_id: str) -> list[JobEvent]:
    """Every event of the job, the ones after ``final`` too (``events()`` stops at ``final``)."""
    return cluster.store.read_events(job_id, count=10_000)


def outcomes(cluster: Cluster, job_id: str, event: str) -> list[tuple[str, int, int | None, bool]]:
    """(type, attempt, status code, retried) of the job's webhook events for ``event``."""
    return [
        (e.type, e.data["attempt"], e.data.get("status_code"), e.data.get("retry_at") is not None)
        for e in stream(cluster, job_id)
        if e.type in ("webhook_delivered", "webhook_failed") and e.data["event"] == event
    ]


def test_a_park_and_the_end_are_posted_signed_and_a_failing_receiver_gets_the_third_attempt(
    cluster: Hosts,
) -> None:
    c, _, _ = cluster
    finals = 0

    def answer(request: dict[str, Any]) -> int:
        nonlocal finals
        if json.loads(request["body"])["event"] != "final":
            return 204
        finals += 1
        return 500 if finals <= 2 else 200

    with Receiver(answer) as receiver:
        handle = submit(c, receiver.url)
        wait_for(
            lambda: receiver.of(handle.id, "waiting_for_person"),
            EVENT_SECONDS,
            "the waiting_for_person delivery",
        )
        status = handle.status()
        assert status.state == "awaiting_approval"
        [parked] = receiver.of(handle.id, "waiting_for_person")
        body = json.loads(parked["body"])
        assert body["pause_id"] == status.pause_id and body["reason"] == "approval_requested"
        assert (
            body["pause"]["pending"][0]["tool"] == "notify"
            and body["id"] == parked["headers"]["Tandem-Delivery"]
        )
        assert parked["path"] == "/hooks/tandem" and parked["headers"]["Tandem-Event"] == "waiting_for_person"
        assert verify(SECRET, parked["headers"]["Tandem-Signature"], parked["body"])

        handle.approve(1)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        wait_for(
            lambda: len(receiver.of(handle.id, "final")) == 3, EVENT_SECONDS, "three final delivery attempts"
        )
        wait_for(
            lambda: outcomes(c, handle.id, "final")[-1:] == [("webhook_delivered", 3, 200, False)],
            EVENT_SECONDS,
        )
        time.sleep(1.0)  # a fourth attempt would come now
        posts = receiver.of(handle.id, "final")

    assert len(posts) == 3
    ids = {p["headers"]["Tandem-Delivery"] for p in posts}
    assert len(ids) == 1, ids  # the same delivery id on every attempt
    assert [p["headers"]["Tandem-Attempt"] for p in posts] == ["1", "2", "3"]
    assert all(verify(SECRET, p["headers"]["Tandem-Signature"], p["body"]) for p in posts)
    assert not verify("another-secret-0123456789", posts[0]["headers"]["Tandem-Signature"], posts[0]["body"])
    assert len({p["body"] for p in posts}) == 1  # one body, signed afresh each time
    final = json.loads(posts[0]["body"])
    assert final["id"] in ids and final["result"]["status"] == "completed" and final["job_id"] == handle.id
    assert outcomes(c, handle.id, "final") == [
        ("webhook_failed", 1, 500, True),
        ("webhook_failed", 2, 500, True),
        ("webhook_delivered", 3, 200, False),
    ]
    assert outcomes(c, handle.id, "waiting_for_person") == [("webhook_delivered", 1, 204, False)]
    delivered = [e for e in stream(c, handle.id) if e.type == "webhook_delivered"]
    assert all(e.data["url"] == receiver.url for e in delivered)
    assert c.redis.hget(f"tandem:{{{handle.id}}}:webhooks", f"{final['id']}:state") == b"delivered"


def test_a_host_outside_the_allow_list_is_refused_at_submit(cluster: Hosts) -> None:
    c, _, _ = cluster
    with pytest.raises(
        JobSpecError, match=r"field 'webhooks.0.url': host 'hooks.example.com' is not allowed"
    ):
        submit(c, "https://hooks.example.com/tandem")


def test_a_worker_killed_mid_delivery_loses_nothing(cluster: Hosts) -> None:
    c, _, _ = cluster
    arrived, release = threading.Event(), threading.Event()

    def answer(request: dict[str, Any]) -> int:
        if request["headers"]["Tandem-Attempt"] == "1" and json.loads(request["body"])["event"] == "final":
            arrived.set()
            release.wait(30)  # the worker posting it is killed meanwhile
        return 200

    with Receiver(answer) as receiver:
        handle = submit(c, receiver.url)
        wait_for(lambda: handle.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
        handle.approve(1)
        assert arrived.wait(60), "no final delivery arrived"
        first = c.groups[0]
        for role in ("thinker", "actor", "tools"):
            c.kill(first, role)
        release.set()
        c.start("thinker", "actor", "tools", name="second")
        wait_for(
            lambda: len(receiver.of(handle.id, "final")) >= 2, EVENT_SECONDS, "the delivery to be tried again"
        )
        wait_for(
            lambda: ("webhook_delivered", 2, 200, False) in outcomes(c, handle.id, "final"), EVENT_SECONDS
        )
        posts = receiver.of(handle.id, "final")

    assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 1
    assert [p["headers"]["Tandem-Attempt"] for p in posts] == ["1", "2"]
    assert outcomes(c, handle.id, "final") == [("webhook_delivered", 2, 200, False)]
