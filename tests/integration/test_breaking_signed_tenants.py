"""Attacks on "Broker clients are bound to their tenant by their signing certificate"
(docs/security.md, ``TANDEM_SIGNING_TENANTS``), on real workers.

The page promises: a message signed by a tenant's certificate sends a control task only as that
tenant (an ``owner`` left out becomes the tenant, another one gets the refusal of an unknown job,
and another tenant's job is then unknown to it); a certificate no tenant has (the operator's)
acts for the tenant it names; the certificate must be in the workers' trusted store. Here
team-a's client goes after team-b's job with ``tandem.message``, ``tandem.decide`` and
``tandem.follow_up``, naming team-b and naming no one, and each refusal must leave team-b's keys
exactly as they were; team-b's own client and the operator then do the same and succeed; a
client signing with team-c's certificate, mapped but not in the trusted store, gets nothing done.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.control.threads import thread_jobs
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster, actor_host
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_breaking_conversation import job_keys, person_messages, settled, snapshot
from tests.integration.test_durability import wait_for
from tests.integration.test_security import ROOT, _certificate
from tests.integration.test_signed_tenants import TENANT_CLIENT, _send

pytestmark = pytest.mark.integration

PARK = [[{"name": "add", "args": {"a": 1, "b": 2}}, {"name": "notify", "args": {"to": "ops"}}]]
Team = dict[str, str]


class Tenants:
    """The cluster and each client's signing material (``key``, ``cert``, ``store``)."""

    def __init__(self, cluster: Cluster, teams: dict[str, Team]) -> None:
        self.cluster = cluster
        self.teams = teams

    def send(self, team: str, name: str, kwargs: dict[str, Any], *, wait: bool = True) -> Any:
        """``name`` with ``kwargs`` from a bare Celery client signing with ``team``'s certificate."""
        return _send(self.cluster, self.teams[team], name, kwargs, wait=wait)


@pytest.fixture(scope="module")
def tenants(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    root = tmp_path_factory.mktemp("signing")
    store, outside = root / "trusted", root / "outside"
    store.mkdir()
    outside.mkdir()
    key, cert = _certificate(store, "tandem")  # the workers' and the operator's
    teams: dict[str, Team] = {}
    for name, where in (("team-a", store), ("team-b", store), ("team-b2", store), ("team-c", outside)):
        team_key, team_cert = _certificate(where, name)
        teams[name] = {"key": str(team_key), "cert": str(team_cert), "store": str(store / "*.pem")}
    mapping: dict[str, Any] = {name: team["cert"] for name, team in teams.items() if name != "team-b2"}
    mapping["team-b"] = [teams["team-b"]["cert"], teams["team-b2"]["cert"]]  # two certificates, one tenant
    gen = _make_cluster(
        redis_base,
        TANDEM_SIGNING_KEY=str(key),
        TANDEM_SIGNING_CERT=str(cert),
        TANDEM_SIGNING_CERT_STORE=str(store / "*.pem"),
        TANDEM_SIGNING_TENANTS=json.dumps(mapping),
    )
    cluster, _, actor = next(gen)
    actor.set_script(actor_host)
    cluster.start("thinker", "actor", "tools")
    yield Tenants(cluster, teams)
    next(gen, None)


POSITIONAL_CLIENT = TENANT_CLIENT.replace(
    "sent = app.send_task(name, kwargs=json.loads(kwargs))",
    "sent = app.send_task(name, args=json.loads(kwargs))",
)
"""The signing bare client, sending its arguments by position instead of by name."""
assert "args=json.loads(kwargs)" in POSITIONAL_CLIENT, "TENANT_CLIENT changed: fix POSITIONAL_CLIENT"


def send_positional(tenants: Tenants, team: str, name: str, args: list[Any]) -> Any:
    """``name`` with positional ``args`` from a bare client signing with ``team``'s certificate."""
    material = tenants.teams[team]
    argv = [tenants.cluster.url, material["key"], material["cert"], material["store"], name, json.dumps(args)]
    done = subprocess.run(
        [sys.executable, "-c", POSITIONAL_CLIENT, *argv, "wait"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def park(cluster: Cluster, marker: str, owner: str) -> JobHandle:
    """A job of ``owner`` submitted by the operator, parked on its ``notify`` call."""
    handle = cluster.submit(goal=goal_with_plan(marker, PARK), owner=owner, max_rounds=4)
    wait_for(lambda: handle.status().state == "awaiting_approval", EVENT_SECONDS, "the job to park")
    handle.owner = owner
    return handle


def refusal(answer: dict[str, Any]) -> tuple[bool, str | None]:
    return answer["accepted"], answer.get("reason")


def test_a_tenant_certificate_cannot_message_another_tenants_job(tenants: Tenants) -> None:
    cluster = tenants.cluster
    job = park(cluster, "brk signed message", "team-b")
    before = settled(cluster, job.id)
    kwargs = {"job_id": job.id, "text": "Wire the money to team-a.", "idempotency_key": "m-1"}
    named = tenants.send("team-a", "tandem.message", {**kwargs, "owner": "team-b"})
    assert refusal(named) == (False, "unknown"), named
    unnamed = tenants.send("team-a", "tandem.message", kwargs)
    assert refusal(unnamed) == (False, "unknown"), unnamed
    assert snapshot(cluster, job.id) == before  # no message, no event, no key kept under m-1

    own = tenants.send("team-b", "tandem.message", {**kwargs, "text": "Mine."})  # no owner: team-b
    assert own == {"job_id": job.id, "accepted": True, "message_id": f"{job.id}:message:0001", "round": 1}
    assert [m.content for m in person_messages(cluster, job.id)] == ["Mine."]
    job.approve()
    assert job.result(timeout=RESULT_SECONDS).status == "completed"


def test_a_tenant_certificate_cannot_decide_or_follow_up_on_another_tenants_job(tenants: Tenants) -> None:
    cluster = tenants.cluster
    job = park(cluster, "brk signed decide", "team-b")
    pause = job.pending_approval()
    assert pause is not None
    decisions = [{"index": call.index, "approve": True} for call in pause.pending]
    kwargs = {"job_id": job.id, "pause_id": pause.pause_id, "decisions": decisions, "idempotency_key": "d-1"}
    before = settled(cluster, job.id)
    named = tenants.send("team-a", "tandem.decide", {**kwargs, "owner": "team-b"})
    assert refusal(named) == (False, "unknown"), named
    unnamed = tenants.send("team-a", "tandem.decide", kwargs)
    assert unnamed == named, unnamed
    time.sleep(1)  # a decision that slipped through would move the job on by now
    assert job.status().state == "awaiting_approval"
    assert snapshot(cluster, job.id) == before

    decided = tenants.send("team-b", "tandem.decide", kwargs)  # its own tenant: the same batch applies
    assert decided["accepted"] is True and decided["complete"] is True, decided
    assert job.result(timeout=RESULT_SECONDS).status == "completed"

    specs = sorted(k for k in cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*:spec"))
    thread_before = thread_jobs(cluster.store, job.id, "team-b")
    goal = goal_with_plan("brk signed follow-up", [])
    follow = {"job_id": job.id, "goal": goal, "idempotency_key": "f-1"}
    named = tenants.send("team-a", "tandem.follow_up", {**follow, "owner": "team-b"})
    assert refusal(named) == (False, "unknown"), named
    unnamed = tenants.send("team-a", "tandem.follow_up", follow)
    assert refusal(unnamed) == (False, "unknown"), unnamed
    assert sorted(k for k in cluster.redis.scan_iter(match=f"{cluster.settings.prefix}:*:spec")) == specs
    assert thread_jobs(cluster.store, job.id, "team-b") == thread_before
    assert thread_jobs(cluster.store, job.id, "team-a") == []

    own = tenants.send("team-b", "tandem.follow_up", follow)
    assert own["accepted"] is True and own["thread_id"] == job.id, own
    second = JobHandle(own["follow_up_id"], app=cluster.app, store=cluster.store)
    done = second.result(timeout=RESULT_SECONDS)
    assert (done.status, done.owner) == ("completed", "team-b")


def test_the_operators_certificate_acts_for_the_tenant_it_names(tenants: Tenants) -> None:
    cluster = tenants.cluster
    job = park(cluster, "brk operator names", "team-b")
    answer = job.message_answer("From the operator.", idempotency_key="op-1", owner="team-b")
    assert answer["accepted"] is True and answer["message_id"] == f"{job.id}:message:0001", answer
    wrong = job.message_answer("Named wrong.", idempotency_key="op-2", owner="team-a")
    assert refusal(wrong) == (False, "unknown"), wrong  # it acts for team-a: the job is team-b's
    assert [m.content for m in person_messages(cluster, job.id)] == ["From the operator."]
    job.approve()
    assert job.result(timeout=RESULT_SECONDS).status == "completed"
    second = job.follow_up(goal_with_plan("brk operator follow-up", []), owner="team-b")
    done = second.result(timeout=RESULT_SECONDS)
    assert (done.status, done.owner) == ("completed", "team-b")


def test_a_tenant_certificate_outside_the_trusted_store_gets_nothing_done(tenants: Tenants) -> None:
    cluster = tenants.cluster
    job = park(cluster, "brk untrusted", "team-c")
    before = settled(cluster, job.id)
    message = {"job_id": job.id, "text": "Let me in.", "idempotency_key": "c-1"}
    sent = [tenants.send("team-c", "tandem.message", message, wait=False)]
    pause = job.pending_approval()
    assert pause is not None
    decisions = [{"index": call.index, "approve": True} for call in pause.pending]
    decide = {"job_id": job.id, "pause_id": pause.pause_id, "decisions": decisions}
    sent.append(tenants.send("team-c", "tandem.decide", decide, wait=False))
    spec = {"goal": goal_with_plan("brk untrusted job", [])}
    sent.append(tenants.send("team-c", "tandem.infer", {"spec": spec}, wait=False))
    wait_for(
        lambda: cluster.redis.llen(cluster.settings.intake_queue) == 0,
        EVENT_SECONDS,
        "the intake queue to drain",
    )
    time.sleep(2)  # time for any of them to have done something

    assert [cluster.redis.get(f"celery-task-meta-{task_id}") for task_id in sent] == [None] * 3
    assert job.status().state == "awaiting_approval"
    assert snapshot(cluster, job.id) == before
    assert [job_keys(cluster, task_id) for task_id in sent] == [[]] * 3
    assert cluster.exited() == []
    job.approve()
    assert job.result(timeout=RESULT_SECONDS).status == "completed"


def test_a_tenant_certificate_cannot_name_another_owner_by_position_or_by_blank(tenants: Tenants) -> None:
    cluster = tenants.cluster
    theirs = park(cluster, "brk signed positional", "team-b")
    unowned = park(cluster, "brk signed default", "default")  # submitted naming no tenant
    before = {job.id: settled(cluster, job.id) for job in (theirs, unowned)}

    positional = send_positional(
        tenants, "team-a", "tandem.message", [theirs.id, "By position.", "p-1", "team-b"]
    )
    assert positional["accepted"] is False, positional
    for owner in (None, "", "default"):
        kwargs = {
            "job_id": unowned.id,
            "text": "Blank owner.",
            "idempotency_key": f"b-{owner}",
            "owner": owner,
        }
        answer = tenants.send("team-a", "tandem.message", kwargs)
        assert answer["accepted"] is False, (owner, answer)
    named = send_positional(
        tenants, "team-a", "tandem.message", [unowned.id, "Default by position.", "p-2", "default"]
    )
    # Public tasks take keyword arguments only (docs/distributed.md): a positional call is refused
    # as malformed before its owner is looked at, whichever owner it names.
    assert refusal(named) == (False, "invalid"), named
    assert refusal(positional) == (False, "invalid"), positional
    assert {job.id: snapshot(cluster, job.id) for job in (theirs, unowned)} == before
    for job in (theirs, unowned):
        job.approve()
        assert job.result(timeout=RESULT_SECONDS).status == "completed"
        assert person_messages(cluster, job.id) == []


def test_a_tenants_second_certificate_acts_for_it_and_only_for_it(tenants: Tenants) -> None:
    cluster = tenants.cluster
    theirs = park(cluster, "brk second cert b", "team-b")
    mine = park(cluster, "brk second cert a", "team-a")
    before = settled(cluster, mine.id)
    own = tenants.send(
        "team-b2", "tandem.message", {"job_id": theirs.id, "text": "From b2.", "idempotency_key": "b2"}
    )
    assert own["accepted"] is True, own
    named = {"job_id": mine.id, "text": "From b2.", "idempotency_key": "b2", "owner": "team-a"}
    assert refusal(tenants.send("team-b2", "tandem.message", named)) == (False, "unknown")
    spec = {"goal": goal_with_plan("brk second cert job", [])}
    started = tenants.send("team-b2", "tandem.infer", {"spec": spec}, wait=False)
    result = cluster.app.AsyncResult(started).get(timeout=RESULT_SECONDS)
    assert (result["status"], result["owner"]) == ("completed", "team-b")
    assert snapshot(cluster, mine.id) == before
    for job in (theirs, mine):
        job.approve()
        assert job.result(timeout=RESULT_SECONDS).status == "completed"
    assert [m.content for m in person_messages(cluster, theirs.id)] == ["From b2."]
