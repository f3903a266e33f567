"""Trying to break the promises of docs/webhooks.md on real ``celery worker`` processes and a real
Redis: retries and their outcome events for a slow receiver, a 3xx, a 4xx and a dropped connection;
the signature by the documented recipe; delivery ids stable across attempts and distinct across
occasions; several webhooks; the allow-list against URL tricks; credentials in a URL kept out of
events and logs; nothing sent again after success.

The receivers are small HTTP servers on 127.0.0.1 in the test. The mono jobs follow a plan of
``notify`` calls (``requires_approval``): the job parks (``waiting_for_person``), is approved, and
ends (``final``). Deliveries are given up after 3 attempts here (``TANDEM_WEBHOOK_MAX_ATTEMPTS``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.errors import JobSpecError
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_decide import any_host
from tests.integration.test_durability import wait_for
from tests.integration.webhook_receiver import CLOSE, Receiver
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
SECRET = "breaking-webhook-secret-0123456789"
ENV = {
    "TANDEM_STALL_SECONDS": "2",
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_WEBHOOK_SECRET": SECRET,
    "TANDEM_WEBHOOK_BACKOFF_SECONDS": "0.3",
    "TANDEM_WEBHOOK_TIMEOUT": "2",
    "TANDEM_WEBHOOK_MAX_ATTEMPTS": "3",
    "TANDEM_WEBHOOK_ALLOWED_HOSTS": "loopback,.example.test",
}
NOTIFY = [[{"name": "notify", "args": {"to": "ops"}}]]


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, **ENV)
    hosts = next(clusters)
    hosts[2].set_script(any_host)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, hooks: list[dict[str, Any]], plan: Any = NOTIFY, **spec: Any) -> JobHandle:
    goal = goal_with_plan("webhooks", plan)
    return cluster.submit(goal=goal, reasoner="mono", max_rounds=4, webhooks=hooks, **spec)


def parked(handle: JobHandle) -> str:
    try:
        wait_for(lambda: handle.status().state == "awaiting_approval", EVENT_SECONDS, f"{handle.id} to park")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {handle.status()}") from None
    pause = handle.status().pause_id
    assert pause is not None
    return pause


def outcomes(cluster: Cluster, job_id: str, event: str) -> list[tuple[str, int, int | None, bool]]:
    """(type, attempt, status code, retried) of the job's webhook events for ``event``."""
    return [
        (e.type, e.data["attempt"], e.data.get("status_code"), e.data.get("retry_at") is not None)
        for e in cluster.store.read_events(job_id, count=10_000)
        if e.type in ("webhook_delivered", "webhook_failed") and e.data["event"] == event
    ]


def webhook_events(cluster: Cluster, job_id: str) -> list[dict[str, Any]]:
    return [
        e.data
        for e in cluster.store.read_events(job_id, count=10_000)
        if e.type in ("webhook_delivered", "webhook_failed")
    ]


def documented_check(secret: str, header: str, body: bytes) -> bool:
    """The recipe of docs/webhooks.md, "Without tandem, in any language"."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    t, given = fields.get("t", ""), fields.get("v1", "")
    if not t.isdigit() or abs(time.time() - int(t)) > 300:
        return False
    expected = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given)


def the_end(cluster: Cluster, handle: JobHandle) -> None:
    """Approve every pause of the job until it completes."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        status = handle.status()
        if status.state == "awaiting_approval":
            handle.approve(pause_id=status.pause_id)
        elif status.state in ("completed", "failed", "cancelled", "truncated"):
            break
        time.sleep(0.1)
    assert handle.result(timeout=10).status == "completed"


def test_a_slow_receiver_times_out_and_gets_the_same_delivery_again(cluster: Hosts) -> None:
    c, _, _ = cluster

    def answer(request: dict[str, Any]) -> int:
        if request["headers"]["Tandem-Attempt"] == "1":
            time.sleep(4)  # past TANDEM_WEBHOOK_TIMEOUT=2
        return 200

    with Receiver(answer) as receiver:
        handle = submit(c, [{"url": receiver.url, "events": ["final"]}])
        the_end(c, handle)
        wait_for(
            lambda: ("webhook_delivered", 2, 200, False) in outcomes(c, handle.id, "final"), EVENT_SECONDS
        )
        time.sleep(5)  # past a lease (timeout + lease seconds): a sweeper would send it again now
        posts = receiver.of(handle.id)
    assert outcomes(c, handle.id, "final") == [
        ("webhook_failed", 1, None, True),
        ("webhook_delivered", 2, 200, False),
    ]
    [failed] = [e for e in webhook_events(c, handle.id) if e["attempt"] == 1]
    assert failed["error"] and failed["status_code"] is None, failed
    assert [p["headers"]["Tandem-Attempt"] for p in posts] == ["1", "2"]
    assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 1


@pytest.mark.parametrize("status", [301, 302, 307, 400, 404, 410])
def test_a_3xx_or_4xx_is_retried_never_followed_and_given_up_after_the_last_attempt(
    cluster: Hosts, status: int
) -> None:
    c, _, _ = cluster
    with Receiver() as elsewhere:

        def answer(_: dict[str, Any]) -> tuple[int, dict[str, str]]:
            return status, {"Location": elsewhere.url}

        with Receiver(answer) as receiver:
            handle = submit(c, [{"url": receiver.url, "events": ["final"]}])
            the_end(c, handle)
            wait_for(lambda: len(outcomes(c, handle.id, "final")) == 3, EVENT_SECONDS, "three attempts")
            time.sleep(5)  # a fourth attempt, or a sweeper's, would come now
            posts = receiver.of(handle.id)
        assert elsewhere.requests == []  # redirects are not followed
    assert outcomes(c, handle.id, "final") == [
        ("webhook_failed", 1, status, True),
        ("webhook_failed", 2, status, True),
        ("webhook_failed", 3, status, False),  # given up: retry_at null
    ]
    assert [p["headers"]["Tandem-Attempt"] for p in posts] == ["1", "2", "3"]
    assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 1


def test_a_dropped_connection_is_a_failure_without_a_status_and_is_tried_again(cluster: Hosts) -> None:
    c, _, _ = cluster

    def answer(request: dict[str, Any]) -> int:
        return CLOSE if request["headers"]["Tandem-Attempt"] == "1" else 202

    with Receiver(answer) as receiver:
        handle = submit(c, [{"url": receiver.url}])
        parked(handle)
        wait_for(
            lambda: (
                outcomes(c, handle.id, "waiting_for_person")[-1:] == [("webhook_delivered", 2, 202, False)]
            ),
            EVENT_SECONDS,
        )
        the_end(c, handle)
        wait_for(
            lambda: outcomes(c, handle.id, "final")[-1:] == [("webhook_delivered", 2, 202, False)],
            EVENT_SECONDS,
        )
    assert outcomes(c, handle.id, "waiting_for_person") == [
        ("webhook_failed", 1, None, True),
        ("webhook_delivered", 2, 202, False),
    ]
    assert outcomes(c, handle.id, "final") == [
        ("webhook_failed", 1, None, True),
        ("webhook_delivered", 2, 202, False),
    ]


def test_the_signature_verifies_by_the_documented_recipe_and_nothing_else_does(cluster: Hosts) -> None:
    c, _, _ = cluster
    with Receiver() as receiver:
        handle = submit(c, [{"url": receiver.url}])
        parked(handle)
        the_end(c, handle)
        wait_for(lambda: receiver.of(handle.id, "final"), EVENT_SECONDS, "the final delivery")
        posts = receiver.of(handle.id)
    assert [json.loads(p["body"])["event"] for p in posts] == ["waiting_for_person", "final"]
    for post in posts:
        header, body = post["headers"]["Tandem-Signature"], post["body"]
        assert documented_check(SECRET, header, body), header
        assert not documented_check("wrong-secret-0123456789abcdef", header, body)
        assert not documented_check(SECRET, header, body.replace(b'"job_id"', b'"job_id" '))
        t = int(dict(part.split("=", 1) for part in header.split(","))["t"])
        shifted = header.replace(f"t={t}", f"t={t + 1}")
        assert not documented_check(SECRET, shifted, body)  # the timestamp is signed too
        parsed = json.loads(body)
        assert parsed["id"] == post["headers"]["Tandem-Delivery"]
        assert post["headers"]["Tandem-Event"] == parsed["event"] and post["headers"]["Tandem-Attempt"] == "1"
        assert post["headers"]["Content-Type"].startswith("application/json")
        assert (parsed["job_id"], parsed["owner"]) == (handle.id, "default")


def test_the_bodies_carry_every_documented_field(cluster: Hosts) -> None:
    c, _, _ = cluster
    with Receiver() as receiver:
        handle = submit(c, [{"url": receiver.url}])
        pause = parked(handle)
        the_end(c, handle)
        wait_for(lambda: receiver.of(handle.id, "final"), EVENT_SECONDS, "the final delivery")
        # (each event is its own delivery: under load the pause's may still be on its way)
        wait_for(lambda: len(receiver.of(handle.id)) >= 2, EVENT_SECONDS, "the pause's delivery")
        bodies = [json.loads(p["body"]) for p in receiver.of(handle.id)]
    assert len(bodies) == 2, bodies
    waiting, final = sorted(bodies, key=lambda body: body["event"] == "final")
    common = {"id", "event", "job_id", "owner", "at", "links"}
    assert common | {"pause_id", "round", "seq", "state", "reason", "pause"} <= set(waiting), waiting
    assert common | {"result"} <= set(final), final
    assert (waiting["pause_id"], waiting["state"], waiting["reason"]) == (
        pause,
        "awaiting_approval",
        "approval_requested",
    )
    assert [(p["tool"], p["args"]) for p in waiting["pause"]["pending"]] == [("notify", {"to": "ops"})]
    assert {"status", "deliverable", "rounds", "error", "usage"} <= set(final["result"]), final["result"]
    assert final["result"]["status"] == "completed" and final["result"]["deliverable"] == "mono plan done"
    assert abs(final["at"] - time.time()) < 600 and final["links"], final
    assert waiting["id"] != final["id"]


def test_independent_deliveries_a_failing_pause_delivery_does_not_hold_back_the_final(cluster: Hosts) -> None:
    c, _, _ = cluster

    def answer(request: dict[str, Any]) -> int:
        if json.loads(request["body"])["event"] == "waiting_for_person":
            time.sleep(1)
            return 503
        return 200

    with Receiver(answer) as receiver:
        handle = submit(c, [{"url": receiver.url}])
        parked(handle)
        wait_for(lambda: receiver.of(handle.id, "waiting_for_person"), EVENT_SECONDS, "a pause delivery")
        the_end(c, handle)
        wait_for(
            lambda: ("webhook_delivered", 1, 200, False) in outcomes(c, handle.id, "final"), EVENT_SECONDS
        )
        wait_for(
            lambda: len(outcomes(c, handle.id, "waiting_for_person")) == 3,
            EVENT_SECONDS,
            "the pause's 3 attempts",
        )
    assert outcomes(c, handle.id, "final") == [("webhook_delivered", 1, 200, False)]
    assert outcomes(c, handle.id, "waiting_for_person") == [
        ("webhook_failed", 1, 503, True),
        ("webhook_failed", 2, 503, True),
        ("webhook_failed", 3, 503, False),
    ]


def test_each_occasion_has_its_own_delivery_and_none_is_sent_twice_after_success(cluster: Hosts) -> None:
    c, _, _ = cluster
    two = [[{"name": "notify", "args": {"to": "ops"}}], [{"name": "notify", "args": {"to": "dev"}}]]
    with Receiver() as receiver:
        handle = submit(c, [{"url": receiver.url}], plan=two)
        first = parked(handle)
        wait_for(
            lambda: receiver.of(handle.id, "waiting_for_person"), EVENT_SECONDS, "the first pause's delivery"
        )
        handle.approve(pause_id=first)
        second = wait_for(
            lambda: handle.status().state == "awaiting_approval" and handle.status().pause_id != first,
            EVENT_SECONDS,
            "pause 2",
        )
        assert second
        the_end(c, handle)
        wait_for(lambda: receiver.of(handle.id, "final"), EVENT_SECONDS, "the final delivery")
        time.sleep(6)  # past a lease and a stall: a sweeper that sent one again would have now
        posts = receiver.of(handle.id)
    bodies = [json.loads(p["body"]) for p in posts]
    assert [b["event"] for b in bodies] == ["waiting_for_person", "waiting_for_person", "final"]
    assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 3  # distinct occasions, no repeat
    assert [p["headers"]["Tandem-Attempt"] for p in posts] == ["1", "1", "1"]
    assert bodies[0]["pause_id"] == first and bodies[1]["pause_id"] not in (first, None)
    assert [e["attempt"] for e in webhook_events(c, handle.id)] == [1, 1, 1]


def test_every_webhook_of_a_job_gets_its_own_events(cluster: Hosts) -> None:
    c, _, _ = cluster
    with Receiver() as both, Receiver() as finals:
        hooks = [{"url": both.url}, {"url": finals.url, "events": ["final"]}]
        handle = submit(c, hooks)
        parked(handle)
        the_end(c, handle)
        wait_for(
            lambda: both.of(handle.id, "final") and finals.of(handle.id, "final"),
            EVENT_SECONDS,
            "both finals",
        )
        time.sleep(2)
        got_both, got_finals = both.of(handle.id), finals.of(handle.id)
    assert [json.loads(p["body"])["event"] for p in got_both] == ["waiting_for_person", "final"]
    assert [json.loads(p["body"])["event"] for p in got_finals] == ["final"]
    delivered = [(e["event"], e["url"]) for e in webhook_events(c, handle.id)]
    assert sorted(delivered) == sorted(
        [("waiting_for_person", both.url), ("final", both.url), ("final", finals.url)]
    )


def test_a_resumed_jobs_next_end_is_sent_again_as_a_new_delivery(cluster: Hosts) -> None:
    c, _, _ = cluster
    with Receiver() as receiver:
        handle = submit(c, [{"url": receiver.url, "events": ["final"]}])
        parked(handle)
        handle.cancel()
        assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
        wait_for(lambda: receiver.of(handle.id, "final"), EVENT_SECONDS, "the cancelled job's final delivery")
        resumed = handle.resume()
        the_end(c, resumed)

        def finals() -> list[dict[str, Any]]:  # a resume keeps the job's id: count its posts once
            ids = dict.fromkeys([handle.id, resumed.id])
            return [p for job_id in ids for p in receiver.of(job_id, "final")]

        wait_for(lambda: len(finals()) >= 2, EVENT_SECONDS, "the resumed job's final delivery")
        posts = finals()
    statuses = [json.loads(p["body"])["result"]["status"] for p in posts]
    assert statuses == ["cancelled", "completed"], statuses
    assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 2


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1@evil.test/h",
        "http://localhost:80@evil.test/h",
        "http://[::1]@evil.test/h",
        "http://evil.test#@127.0.0.1/h",
        "http://evil.test?@127.0.0.1/h",
        "http://127.0.0.1.evil.test/h",
        "http://localhost.evil.test/h",
        "http://LOCALHOST.EVIL.TEST/h",
        "http://notexample.test/h",
        "http://example.test.evil.com/h",
        "http://example.test.evil.com./h",
        "http://evil.test./h",
        "http://[::ffff:8.8.8.8]/h",
        "http://0.0.0.0:9/h",
        "http://8.8.8.8/h",
        "ftp://127.0.0.1/h",
        "file:///etc/passwd",
    ],
)
def test_a_host_outside_the_allow_list_is_refused_however_it_is_written(cluster: Hosts, url: str) -> None:
    c, _, _ = cluster
    before = {k for k in c.redis.scan_iter(match="tandem:*")}
    with pytest.raises(JobSpecError, match=r"webhooks\.0\.url"):
        submit(c, [{"url": url}])
    # Nothing stored. The workers' delivery shards take a short lock of their own
    # (``tandem:webhooks:<shard>:lock``) whenever they sweep, which is not the submission's.
    added = {k for k in c.redis.scan_iter(match="tandem:*")} - before
    assert {k for k in added if not re.fullmatch(rb"tandem:webhooks:\d+:lock", k)} == set()


def test_the_host_checked_is_the_host_posted_to_even_behind_a_backslash(cluster: Hosts) -> None:
    """``http://evil.test\\@127.0.0.1/``: a browser reads host ``evil.test``; the check and the
    HTTP client both read ``127.0.0.1`` (``evil.test\\`` is userinfo), so it goes to this machine."""
    c, _, _ = cluster
    with Receiver() as receiver:
        url = f"http://evil.test\\@127.0.0.1:{receiver.port}/hooks/tandem"
        handle = submit(c, [{"url": url, "events": ["final"]}], plan=[])
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        wait_for(lambda: outcomes(c, handle.id, "final"), EVENT_SECONDS, "the final delivery")
        assert len(receiver.of(handle.id, "final")) == 1
    [event] = webhook_events(c, handle.id)
    assert (event["url"], event["status_code"]) == (f"http://127.0.0.1:{receiver.port}/hooks/tandem", 204)


def test_six_webhooks_are_refused_at_submit(cluster: Hosts) -> None:
    c, _, _ = cluster
    with pytest.raises(JobSpecError, match="webhooks"):
        submit(c, [{"url": f"http://127.0.0.1:9/h{i}"} for i in range(6)])


def test_credentials_in_a_webhook_url_are_used_but_never_shown(cluster: Hosts) -> None:
    c, _, _ = cluster
    password, query_token = "hunter2-pw-55120", "qs-token-88231"
    with Receiver() as receiver:
        url = f"http://hookuser:{password}@127.0.0.1:{receiver.port}/hooks/tandem?token={query_token}"
        handle = submit(c, [{"url": url}])
        parked(handle)
        the_end(c, handle)
        wait_for(lambda: receiver.of(handle.id, "final"), EVENT_SECONDS, "the final delivery")
        posts = receiver.of(handle.id)
    assert all(p["path"] == f"/hooks/tandem?token={query_token}" for p in posts)  # the workers keep it whole
    expected_auth = "Basic " + base64.b64encode(f"hookuser:{password}".encode()).decode()
    assert all(p["headers"].get("Authorization") == expected_auth for p in posts)
    # The worker records a delivery once the receiver has answered it: wait for both records.
    wait_for(lambda: len(webhook_events(c, handle.id)) >= 2, EVENT_SECONDS, "both deliveries recorded")
    shown = [e["url"] for e in webhook_events(c, handle.id)]
    assert shown == [f"http://127.0.0.1:{receiver.port}/hooks/tandem"] * 2
    everything = json.dumps([e.data for e in c.store.read_events(handle.id, count=10_000)])
    assert password not in everything and query_token not in everything
    assert password not in json.dumps(handle.status().model_dump(mode="json"))
    logs = "".join(
        (g.log_dir / f"{role}.log").read_text(errors="replace") for g in c.groups for role in g.processes
    )
    assert handle.id in logs  # the logs are the ones of this job's workers
    assert password not in logs and query_token not in logs


def test_a_worker_killed_while_posting_a_pause_loses_nothing(redis_base: str) -> None:
    clusters = _make_cluster(redis_base, **ENV)
    c, _, actor = next(clusters)
    try:
        actor.set_script(any_host)
        first = c.start("thinker", "actor", "tools", name="first")
        arrived, release = threading.Event(), threading.Event()

        def answer(request: dict[str, Any]) -> int:
            if request["headers"]["Tandem-Attempt"] == "1":
                arrived.set()
                release.wait(20)  # the worker posting it is killed meanwhile
            return 200

        with Receiver(answer) as receiver:
            handle = submit(c, [{"url": receiver.url, "events": ["waiting_for_person"]}])
            assert arrived.wait(45), "no waiting_for_person delivery arrived"
            for role in ("thinker", "actor", "tools"):
                c.kill(first, role)
            release.set()
            c.start("thinker", "actor", "tools", name="second")
            wait_for(
                lambda: any(
                    o[0] == "webhook_delivered" for o in outcomes(c, handle.id, "waiting_for_person")
                ),
                EVENT_SECONDS,
            )
            posts = receiver.of(handle.id)
            assert handle.status().state == "awaiting_approval"
            handle.approve()
            assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        assert len({p["headers"]["Tandem-Delivery"] for p in posts}) == 1
        assert [p["headers"]["Tandem-Attempt"] for p in posts][-1] != "1"
        assert [o for o in outcomes(c, handle.id, "waiting_for_person") if o[0] == "webhook_delivered"][-1][
            2
        ] == 200
    finally:
        next(clusters, None)


def test_workers_refuse_webhooks_they_cannot_sign_or_may_not_send_and_the_job_fails_saying_so(
    redis_base: str,
) -> None:
    unsigned = {k: v for k, v in ENV.items() if k != "TANDEM_WEBHOOK_SECRET"}
    clusters = _make_cluster(redis_base, **unsigned)
    c, _, actor = next(clusters)
    try:
        actor.set_script(any_host)
        first = c.start("thinker", "actor", "tools", name="unsigned")
        with Receiver() as receiver:
            handle = submit(c, [{"url": receiver.url}])  # this process allows loopback, as the default
            result = handle.result(timeout=RESULT_SECONDS)
            assert result.status == "failed", result
            assert "TANDEM_WEBHOOK_SECRET" in (result.error or ""), result.error
            c.stop_group(first)
            c.start(
                "thinker",
                "actor",
                "tools",
                name="localhost-only",
                **{
                    "TANDEM_WEBHOOK_SECRET": SECRET,
                    "TANDEM_WEBHOOK_ALLOWED_HOSTS": "localhost",
                },
            )
            other = submit(c, [{"url": receiver.url}])  # 127.0.0.1: not the name "localhost"
            refused = other.result(timeout=RESULT_SECONDS)
            assert refused.status == "failed", refused
            assert "'127.0.0.1' is not allowed" in (refused.error or ""), refused.error
            time.sleep(2)
            assert receiver.requests == []
        assert [
            e.type for e in c.store.read_events(other.id, count=10_000) if e.type.startswith("webhook_")
        ] == []
    finally:
        next(clusters, None)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://hooks.example.test/h", True),
        ("http://HOOKS.Example.TEST/h", True),
        ("http://example.test/h", True),
        ("http://notexample.test/h", False),
        ("http://example.test.evil.com/h", False),
        ("http://127.0.0.1@notexample.test/h", False),
        ("https://hooks.example.com/tandem", False),
    ],
)
def test_the_api_applies_the_operators_allow_list_with_the_documented_refusal(
    redis_base: str, url: str, allowed: bool
) -> None:
    token = "breaking-webhooks-token-0123456"
    clusters = _make_cluster(redis_base, **ENV, TANDEM_API_TOKENS=token)
    c, _, _ = next(clusters)
    server = ApiProcess(c.env)
    try:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as client:
            reply = client.post("/v1/jobs", json={"goal": "x", "max_rounds": 1, "webhooks": [{"url": url}]})
        if allowed:
            assert reply.status_code == 202, reply.text
            return
        assert reply.status_code == 422, reply.text
        error = reply.json()["error"]
        host = httpx.URL(url).host
        assert error["code"] == "invalid_spec", error
        assert (
            f"field 'webhooks.0.url': host '{host}' is not allowed "
            "(TANDEM_WEBHOOK_ALLOWED_HOSTS=loopback,.example.test)" in error["message"]
        ), error
        assert [k for k in c.redis.scan_iter(match="tandem:*")] == []  # nothing stored, nothing queued
    finally:
        server.stop()
        next(clusters, None)
