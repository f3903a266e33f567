"""Breaking tests of the cancel's wake (docs/durability.md, "Revoking a job id ... To stop a job,
cancel it"; docs/children.md, "A cancel reaches the whole tree at once"), written from the docs.

A job waiting for an approval, an answer, its children or its tenant's turn ends ``cancelled`` at
once when cancelled, not at the next regular sweep; the same cancel ends every parked job of its
tree. The workers here sweep once every 450 s (``TANDEM_LEASE_SECONDS`` and
``TANDEM_STALL_SECONDS`` of 3600): no regular sweep can end a job within ``AT_ONCE`` seconds, so a
job that ends within it was ended by the cancel's wake. (A bound on a wait for a record, never a
wall-clock assertion.)
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis.exceptions import NoPermissionError

from tandem.broker_config import Settings
from tandem.client.handle import JobHandle
from tandem.client.submission import submit
from tandem.tasks.app import create_app
from tandem.tasks.state.store import JobStore
from tests.integration.acl_client import client_user
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_children import spawned_children
from tests.integration.test_durability import wait_for
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
NO_SWEEP = {"TANDEM_STALL_SECONDS": "3600", "TANDEM_LEASE_SECONDS": "3600"}
AT_ONCE = 15.0
"""How long a cancelled parked job may take to end: far below the 450 s between regular sweeps."""
TOKEN = "breaking-cancel-wake-token-0123"
WAKE = "tandem:live:wake"

APPROVE = goal_with_plan("notify ops", [[{"name": "notify", "args": {"to": "ops"}}]])
ASK = goal_with_plan("book a trip", [[{"name": "book_trip", "args": {}}]])
ENDLESS = "NEVER_DONE keep reading"


def fan(*goals: str) -> str:
    """A goal whose mono job starts one mono child per goal and waits for all of them."""
    return goal_with_plan("fan out", [[{"name": "fan_out", "args": {"goals": list(goals), "max_rounds": 4}}]])


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.breaking_wake_tools:toolkit",
        TANDEM_TENANTS=json.dumps({"solo": {"max_running_jobs": 1}}),
        TANDEM_API_TOKENS=TOKEN,
        **NO_SWEEP,
    )
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 4})
    yield hosts
    next(clusters, None)


def parked(c: Cluster, job_id: str) -> tuple[str, str]:
    """The job's state and pause kind, from its record."""
    record = c.redis.hgetall(c.store.key(job_id, "state"))
    return record.get(b"state", b"").decode(), record.get(b"pause_kind", b"").decode()


def wait_parked(c: Cluster, job_id: str, state: str, pause_kind: str | None = None) -> None:
    def holds() -> bool:
        now, kind = parked(c, job_id)
        return now == state and (pause_kind is None or kind == pause_kind)

    wait_for(holds, EVENT_SECONDS, f"job {job_id} to be {state} ({pause_kind}); it is {parked(c, job_id)}")


def park_tree(c: Cluster, handle: JobHandle) -> dict[str, str]:
    """Wait until the tree ``tree_goal`` makes is parked everywhere; each job's id by its role."""
    wait_parked(c, handle.id, "waiting_for_children", "children")
    asker, fanner = spawned_children(c, handle.id)
    wait_parked(c, asker, "awaiting_approval", "question")
    wait_parked(c, fanner, "waiting_for_children", "children")
    grand_asker, grand_approver = spawned_children(c, fanner)
    wait_parked(c, grand_asker, "awaiting_approval", "question")
    wait_parked(c, grand_approver, "awaiting_approval", "approval")
    return {
        "parent": handle.id,
        "asker": asker,
        "fanner": fanner,
        "grand_asker": grand_asker,
        "grand_approver": grand_approver,
    }


def tree_goal() -> str:
    """A parent of two children: one asks a question, one starts two children of its own (one
    asks, one awaits approval): every job of the tree parks."""
    return fan(ASK, fan(ASK, APPROVE))


def ended_at_once(c: Cluster, jobs: dict[str, str]) -> dict[str, Any]:
    """Wait up to ``AT_ONCE`` for every job to have a result; each job's status (None: no end)."""
    with contextlib.suppress(AssertionError):
        wait_for(lambda: all(c.store.result(x) is not None for x in jobs.values()), AT_ONCE, "the tree's end")
    outcome: dict[str, Any] = {}
    for role, job_id in jobs.items():
        result = c.store.result(job_id)
        outcome[role] = None if result is None else result.status
    return outcome


def test_a_cancel_ends_a_job_awaiting_approval_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = c.submit(goal=APPROVE, reasoner="mono", max_rounds=4, approval_timeout_s=3600)
    wait_parked(c, handle.id, "awaiting_approval", "approval")
    handle.cancel()
    assert handle.result(timeout=AT_ONCE).status == "cancelled"
    assert parked(c, handle.id)[0] == "cancelled"
    assert [getattr(e, "status", None) for e in c.store.read_events(handle.id) if e.type == "final"] == [
        "cancelled"
    ]
    assert [x for x in c.tool_calls() if x["job"] == handle.id] == []  # notify never ran


def test_a_cancel_ends_a_job_waiting_for_an_answer_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = c.submit(goal=ASK, reasoner="mono", max_rounds=4, answer_timeout_s=3600)
    wait_parked(c, handle.id, "awaiting_approval", "question")
    handle.cancel()
    assert handle.result(timeout=AT_ONCE).status == "cancelled"
    assert parked(c, handle.id)[0] == "cancelled"
    # the question's run recorded itself; the booking never ran
    assert [x["name"] for x in c.tool_calls() if x["job"] == handle.id] == ["book_trip_run"]


def test_a_cancel_ends_a_job_waiting_for_its_tenants_turn_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    blocker = c.submit(goal=ENDLESS, reasoner="mono", max_rounds=400, owner="solo")
    wait_parked(c, blocker.id, "running")
    waiting = c.submit(goal=ENDLESS, reasoner="mono", max_rounds=400, owner="solo")
    try:
        wait_parked(c, waiting.id, "waiting")
        waiting.cancel()
        assert waiting.result(timeout=AT_ONCE).status == "cancelled"
        assert parked(c, waiting.id)[0] == "cancelled"
        assert parked(c, blocker.id)[0] == "running"  # the other job of the tenant goes on
    finally:
        blocker.cancel()
    assert blocker.result(timeout=RESULT_SECONDS).status == "cancelled"


def test_a_cancel_twice_ends_a_parked_tree_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = c.submit(goal=tree_goal(), reasoner="mono", max_rounds=4, answer_timeout_s=3600)
    jobs = park_tree(c, handle)
    handle.cancel()
    handle.cancel()  # "Cancelling again is harmless"
    assert ended_at_once(c, jobs) == dict.fromkeys(jobs, "cancelled")
    assert {role: parked(c, x)[0] for role, x in jobs.items()} == dict.fromkeys(jobs, "cancelled")
    booked = [x for x in c.tool_calls() if x["job"] in jobs.values() and x["name"] in ("book_trip", "notify")]
    assert booked == []  # no question was answered, no notification sent
    handle.cancel()  # once more, after the end: still harmless
    assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
    finals = {role: [e.type for e in c.store.read_events(x)].count("final") for role, x in jobs.items()}
    assert finals == dict.fromkeys(jobs, 1)  # one end each


def test_a_cancel_through_the_api_ends_a_parked_tree_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    server = ApiProcess(c.env)
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
            created = api.post("/v1/jobs", json={"goal": tree_goal(), "reasoner": "mono", "max_rounds": 4})
            assert created.status_code in (200, 201, 202), created.text
            handle = JobHandle(created.json()["id"], c.store, c.app)
            jobs = park_tree(c, handle)
            cancelled = api.post(f"/v1/jobs/{handle.id}/cancel")
            assert cancelled.status_code == 202, cancelled.text
            assert cancelled.json()["cancel_requested"] is True
            assert ended_at_once(c, jobs) == dict.fromkeys(jobs, "cancelled")
            assert api.get(f"/v1/jobs/{handle.id}").json()["status"]["state"] == "cancelled"
    finally:
        server.stop()


def _acl_client(c: Cluster, url: str) -> tuple[Any, JobStore]:
    """An app and a job store connected as the client user ``url`` names."""
    from redis import Redis

    env = {**c.env, "TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}
    settings = Settings.from_env(env)
    return create_app(settings), JobStore(Redis.from_url(url), settings.prefix)


def test_the_client_user_cancels_a_parked_tree_and_reads_it(cluster: Hosts) -> None:
    c, _, _ = cluster
    with client_user(c) as user:
        login = user.connection_pool.connection_kwargs
        url = c.url.replace("redis://", f"redis://{login['username']}:{login['password']}@")
        app, store = _acl_client(c, url)
        try:
            handle = submit({"goal": tree_goal(), "reasoner": "mono", "max_rounds": 4}, app=app, store=store)
            jobs = park_tree(c, handle)
            assert handle.status().state == "waiting_for_children"
            seen = [e.type for e in handle.events(timeout=2)]  # the client user reads the events
            assert "children_spawned" in seen, seen
            handle.cancel()
            assert ended_at_once(c, jobs) == dict.fromkeys(jobs, "cancelled")
            assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
            assert [e.type for e in handle.events(timeout=RESULT_SECONDS)][-1] == "final"
        finally:
            app.close()


def test_the_client_user_cannot_write_a_jobs_children_spec_memory_or_result(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = c.submit(goal=fan(ASK), reasoner="mono", max_rounds=4, answer_timeout_s=3600)
    wait_parked(c, handle.id, "waiting_for_children", "children")
    [child] = spawned_children(c, handle.id)
    wait_parked(c, child, "awaiting_approval", "question")
    children = c.store.key(handle.id, "children")
    assert c.redis.zcard(children) == 1  # the index the docs name is there
    with client_user(c) as user:
        assert user.exists(c.store.key(handle.id, "spec")) == 1  # it reads the job store
        refused = {
            "adopting a job into the children index": lambda: user.zadd(children, {"someone-else": 0}),
            "dropping a child from the children index": lambda: user.zrem(children, child),
            "replacing the spec": lambda: user.set(c.store.key(handle.id, "spec"), "{}"),
            "deleting the spec": lambda: user.delete(c.store.key(handle.id, "spec")),
            "writing the memory": lambda: user.set(c.store.key(handle.id, "memory"), "{}"),
            "expiring the memory": lambda: user.expire(c.store.key(handle.id, "memory"), 1),
            "writing the child's Celery result": lambda: user.set(
                f"celery-task-meta-{child}", json.dumps({"status": "SUCCESS", "result": None})
            ),
            "expiring the children index": lambda: user.expire(children, 1),
        }
        allowed = []
        for what, attempt in refused.items():
            try:
                attempt()
            except NoPermissionError:
                continue
            allowed.append(what)
        assert allowed == []
    assert c.redis.zrange(children, 0, -1) == [child.encode()]
    handle.cancel()
    assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"


def test_the_client_user_cancels_a_job_waiting_for_its_tenants_turn_and_the_turn_goes_on(
    cluster: Hosts,
) -> None:
    """The client user may only read ``tandem:tenants:*`` (docs/security.md): its cancel of a job
    in its tenant's waiting list still ends it at once, and the tenant's next job gets the slot."""
    c, _, _ = cluster
    blocker = c.submit(goal=ENDLESS, reasoner="mono", max_rounds=400, owner="solo")
    wait_parked(c, blocker.id, "running")
    with client_user(c) as user:
        login = user.connection_pool.connection_kwargs
        app, store = _acl_client(
            c, c.url.replace("redis://", f"redis://{login['username']}:{login['password']}@")
        )
        try:
            waiting = submit(
                {"goal": ENDLESS, "reasoner": "mono", "max_rounds": 400, "owner": "solo"},
                app=app,
                store=store,
            )
            wait_parked(c, waiting.id, "waiting")
            waiting.cancel()
            assert waiting.result(timeout=AT_ONCE).status == "cancelled"
        finally:
            app.close()
    assert parked(c, waiting.id)[0] == "cancelled"
    blocker.cancel()
    assert blocker.result(timeout=RESULT_SECONDS).status == "cancelled"
    after = c.submit(goal="one more", reasoner="mono", max_rounds=4, owner="solo")
    assert after.result(timeout=RESULT_SECONDS).status == "completed"  # the cancelled job took no slot
    assert parked(c, waiting.id)[0] == "cancelled"  # and it was never admitted afterwards


def test_a_second_cancel_through_the_api_is_harmless(cluster: Hosts) -> None:
    c, _, _ = cluster
    server = ApiProcess(c.env)
    try:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
            created = api.post("/v1/jobs", json={"goal": APPROVE, "reasoner": "mono", "max_rounds": 4})
            job_id = created.json()["id"]
            wait_parked(c, job_id, "awaiting_approval", "approval")
            first = api.post(f"/v1/jobs/{job_id}/cancel")
            second = api.post(f"/v1/jobs/{job_id}/cancel")
            assert first.status_code == 202, first.text
            assert second.status_code in (202, 409), second.text  # 409 once the job has ended (docs/api.md)
            handle = JobHandle(job_id, c.store, c.app)
            assert handle.result(timeout=AT_ONCE).status == "cancelled"
            assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
            events = [e for e in c.store.read_events(job_id) if e.type == "final"]
            assert [getattr(e, "status", None) for e in events] == ["cancelled"]  # one end, not two
    finally:
        server.stop()


def test_the_api_as_the_client_user_cancels_a_parked_tree_at_once(cluster: Hosts) -> None:
    c, _, _ = cluster
    with client_user(c) as user:
        login = user.connection_pool.connection_kwargs
        url = c.url.replace("redis://", f"redis://{login['username']}:{login['password']}@")
        env = {**c.env, "TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}
        server = ApiProcess(env)
        try:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=server.url, headers=auth, timeout=60) as api:
                created = api.post(
                    "/v1/jobs", json={"goal": tree_goal(), "reasoner": "mono", "max_rounds": 4}
                )
                assert created.status_code in (200, 201, 202), created.text
                jobs = park_tree(c, JobHandle(created.json()["id"], c.store, c.app))
                cancelled = api.post(f"/v1/jobs/{jobs['parent']}/cancel")
                assert cancelled.status_code == 202, cancelled.text
                assert ended_at_once(c, jobs) == dict.fromkeys(jobs, "cancelled")
                assert api.get(f"/v1/jobs/{jobs['parent']}").json()["status"]["state"] == "cancelled"
        finally:
            server.stop()
        assert "NOPERM" not in server.log.read_text(), server.log.read_text()[-3000:]


@pytest.fixture
def storm_cluster(redis_base: str) -> Iterator[Hosts]:
    """A cluster of its own whose Actor host answers 429 with ``Retry-After: 120`` (the back-off
    outlasts ``AT_ONCE``; the module's other tests keep a host that answers)."""
    clusters = _make_cluster(
        redis_base, TANDEM_TOOLKIT="tests.integration.breaking_wake_tools:toolkit", **NO_SWEEP
    )
    hosts = next(clusters)
    hosts[2].storm(3600, 120)
    hosts[0].start("actor")
    yield hosts
    next(clusters, None)


def test_a_cancel_ends_a_job_waiting_out_a_back_off_at_once(storm_cluster: Hosts) -> None:
    c, _, _ = storm_cluster
    handle = c.submit(goal="a job", reasoner="mono", max_rounds=4)

    def backing_off() -> bool:  # a `waiting` event whose wait outlasts AT_ONCE by far
        waits = [getattr(e, "until", None) for e in c.store.read_events(handle.id) if e.type == "waiting"]
        now = time.time()
        return any(u is not None and u > now + 60 for u in waits)

    wait_for(backing_off, EVENT_SECONDS, "the job to wait out the host's Retry-After")
    handle.cancel()
    assert handle.result(timeout=AT_ONCE).status == "cancelled"
    assert parked(c, handle.id)[0] == "cancelled"


def test_a_cancel_while_no_worker_runs_ends_the_job_once_one_starts(cluster: Hosts) -> None:
    """Last in the module: it stops the module's workers and starts new ones."""
    c, _, _ = cluster
    handle = c.submit(goal=tree_goal(), reasoner="mono", max_rounds=4, answer_timeout_s=3600)
    jobs = park_tree(c, handle)
    for group in list(c.groups):
        c.stop_group(group)
    handle.cancel()
    assert c.redis.type(WAKE) == b"list" and c.redis.llen(WAKE) >= 1  # the push waits for a reconciler
    assert {role: parked(c, x)[0] for role, x in jobs.items()}["parent"] == "waiting_for_children"
    c.start("thinker", "actor", "tools", concurrency={"tools": 4}, name="later")
    # A new worker's reconciler takes the waiting push; 60 s is still far below a regular sweep (450 s).
    wait_for(lambda: all(c.store.result(x) is not None for x in jobs.values()), 60.0, "the tree's end")
    assert {role: c.store.result(x).status for role, x in jobs.items()} == dict.fromkeys(jobs, "cancelled")  # type: ignore[union-attr]
