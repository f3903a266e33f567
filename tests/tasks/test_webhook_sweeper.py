"""The webhook sweeper on fakeredis: it starts what a dead worker did not (a parked or ended job's
deliveries), sends again a delivery whose attempt was lost, and lets a settled job go."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.broker_config.webhook_settings import WebhookSettings
from tandem.tasks.job_events import ApprovalRequested
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.versions import SPEC_VERSION
from tandem.tasks.webhooks import delivery
from tandem.tasks.webhooks.outbox import Claimed, delivery_id
from tandem.tasks.webhooks.sweeper import WebhookSweeper

HOOKS = [{"url": "http://127.0.0.1:9000/a"}, {"url": "http://127.0.0.1:9000/b", "events": ["final"]}]


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Runtime, list[tuple[str, str]]]]:
    settings = replace(Settings.from_env({}), webhooks=WebhookSettings(secret="s" * 32), lease_seconds=2.0)
    runtime = Runtime(settings)
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(delivery, "send", lambda job_id, did, countdown=None: sent.append((job_id, did)))
    yield runtime, sent


def _now(runtime: Runtime) -> float:
    seconds, micros = runtime.redis.time()
    return float(seconds) + micros / 1e6


def _sweeper(runtime: Runtime) -> WebhookSweeper:
    return WebhookSweeper(runtime, interval=0.1, grace=2.0, armed_look=60.0)


def test_an_ended_job_whose_worker_died_gets_its_final_deliveries(
    rt: tuple[Runtime, list[tuple[str, str]]],
) -> None:
    runtime, sent = rt
    spec = JobSpec(goal="g", webhooks=HOOKS)  # type: ignore[arg-type]
    runtime.store.create("job-1", spec)
    delivery.arm(runtime, "job-1", spec)
    runtime.store.finish(JobResult(job_id="job-1", status="completed", deliverable="42"), ttl=600)
    # The worker that ended the job died before ``notify``: nothing was planned or sent.
    assert runtime.webhooks.deliveries("job-1") == [] and sent == []

    assert _sweeper(runtime).look("job-1", _now(runtime)) == 2
    wanted = {delivery_id("job-1", "final:0", 0), delivery_id("job-1", "final:0", 1)}
    assert {did for _, did in sent} == wanted
    states = {s.delivery.id: s for s in runtime.webhooks.deliveries("job-1")}
    assert set(states) == wanted and all(s.state == "pending" for s in states.values())
    body = json.loads(states[delivery_id("job-1", "final:0", 0)].delivery.body)
    assert body["event"] == "final" and body["result"]["deliverable"] == "42" and body["job_id"] == "job-1"


def test_a_parked_job_gets_one_waiting_for_person_delivery_per_pause(
    rt: tuple[Runtime, list[tuple[str, str]]],
) -> None:
    runtime, sent = rt
    spec = JobSpec(goal="g", webhooks=HOOKS)  # type: ignore[arg-type]
    runtime.store.create("job-2", spec)
    delivery.arm(runtime, "job-2", spec)
    runtime.store.publish("job-2", ApprovalRequested(round=0, pause_id="job-2:0:tools:1", seq=1))
    runtime.redis.hset(
        runtime.store.key("job-2", "state"), mapping={"state": "awaiting_approval", "pause_seq": 1}
    )
    sweeper = _sweeper(runtime)
    assert sweeper.look("job-2", _now(runtime)) == 1  # only the first webhook asks for this event
    assert sent == [("job-2", delivery_id("job-2", "pause:1", 0))]
    [state] = runtime.webhooks.deliveries("job-2")
    body = json.loads(state.delivery.body)
    assert state.delivery.id == delivery_id("job-2", "pause:1", 0) and state.delivery.url.endswith("/a")
    assert (body["event"], body["pause_id"], body["reason"], body["seq"]) == (
        "waiting_for_person",
        "job-2:0:tools:1",
        "approval_requested",
        1,
    )
    # Looked at again the same pause plans nothing new.
    got = runtime.webhooks.claim("job-2", state.delivery.id, lease=30)
    assert isinstance(got, Claimed)
    runtime.webhooks.report("job-2", state.delivery.id, 1, "delivered")
    assert sweeper.look("job-2", _now(runtime) + 100) == 0
    assert [s.state for s in runtime.webhooks.deliveries("job-2")] == ["delivered"]
    # A running job stays watched; once it ended and its deliveries settled it leaves the index.
    runtime.redis.hset(runtime.store.key("job-2", "state"), "state", "running")
    sweeper.look("job-2", _now(runtime) + 100)
    assert runtime.redis.zscore(runtime.webhooks.shard_key("job-2"), "job-2") is not None


def test_a_delivery_whose_attempt_was_lost_is_sent_again_after_its_lease_and_grace(
    rt: tuple[Runtime, list[tuple[str, str]]],
) -> None:
    runtime, sent = rt
    spec = JobSpec(goal="g", webhooks=HOOKS[1:])  # type: ignore[arg-type]
    runtime.store.create("job-3", spec)
    runtime.store.finish(JobResult(job_id="job-3", status="failed", error="x"), ttl=600)
    delivery.notify(runtime, "job-3", spec)
    [(_, did)] = sent
    got = runtime.webhooks.claim("job-3", did, lease=5)  # its worker is then SIGKILLed mid-POST
    assert isinstance(got, Claimed)
    sweeper = _sweeper(runtime)
    now = _now(runtime)
    assert sweeper.look("job-3", now + 1) == 0  # the attempt's lease still holds
    assert sweeper.look("job-3", now + 8) == 1  # lease (5 s) and grace (2 s) are over
    assert sent == [("job-3", did), ("job-3", did)]
    # (The message sent again is not run here: attempt 1's report still holds the delivery.)
    assert runtime.webhooks.report("job-3", did, 1, "delivered") == "delivered"
    sweeper.look("job-3", now + 100)
    assert runtime.redis.zscore(runtime.webhooks.shard_key("job-3"), "job-3") is None  # settled: unwatched


def test_a_job_without_webhooks_is_never_watched(rt: tuple[Runtime, list[tuple[str, str]]]) -> None:
    runtime, sent = rt
    spec = JobSpec(goal="g")
    delivery.arm(runtime, "job-4", spec)
    delivery.notify(runtime, "job-4", spec)
    assert sent == [] and runtime.redis.keys("*webhooks*") == []


def test_a_job_of_formats_this_worker_does_not_read_is_left_to_one_that_does(
    rt: tuple[Runtime, list[tuple[str, str]]],
) -> None:
    runtime, sent = rt
    spec = JobSpec(goal="g", webhooks=HOOKS)  # type: ignore[arg-type]
    runtime.store.create("job-v", spec)
    delivery.arm(runtime, "job-v", spec)
    runtime.store.finish(JobResult(job_id="job-v", status="completed", deliverable="42"), ttl=600)
    state = runtime.store.key("job-v", "state")
    runtime.redis.hset(state, "spec_version", SPEC_VERSION + 1)  # a newer release's spec: not read here
    sweeper = _sweeper(runtime)
    assert sweeper.look("job-v", _now(runtime)) == 0
    assert sent == [] and runtime.webhooks.deliveries("job-v") == []
    next_look = runtime.redis.zscore(runtime.webhooks.shard_key("job-v"), "job-v")
    assert next_look is not None and next_look >= _now(runtime) + 59  # still watched, looked at later

    runtime.redis.hset(state, "spec_version", SPEC_VERSION)
    assert sweeper.look("job-v", _now(runtime)) == 2
