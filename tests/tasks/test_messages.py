"""A person's messages into a running job, over fakeredis: which round reads a message, the answer
kept by idempotency key, refusals that add nothing, the TTLs of what is written, the client's
withdrawal racing a worker, and how each plan's leading model reads the messages."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError

from tandem.client.handle import JobHandle
from tandem.reasoner.loop.react import ReActPlan
from tandem.reasoner.loop.replay import rounds_used
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.task import Task
from tandem.tasks.control.messages import message_job
from tandem.tasks.errors import MessageRefused
from tandem.tasks.job_events import MessageReceived
from tandem.tasks.state.claims import Claim
from tandem.tasks.state.keys import messages_key
from tandem.tasks.state.store import JobStore
from tests.tasks.test_approvals import JOB, LEASE, park

HINT = "Use the 2025 figures, not 2024."


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


def dual(store: JobStore, job_id: str = JOB, owner: str | None = None) -> None:
    """A dual job at its first step, the Thinker's turn of round 0, queued (not claimed)."""
    spec: dict[str, Any] = {"goal": "g", "reasoner": "dual"}
    if owner is not None:
        spec["owner"] = owner
    assert store.machine.create(
        job_id, json.dumps(spec), "dual", (0, "thinker"), [], timeout=3600, ttl_after=600
    )


def person_messages(store: JobStore, job_id: str = JOB) -> dict[str, ModelMessage]:
    raw = store.redis.hgetall(store.key(job_id, "memory"))
    return {k.decode(): ModelMessage.model_validate_json(v) for k, v in raw.items() if b":person:" in k}


def received(store: JobStore, job_id: str = JOB) -> list[dict[str, Any]]:
    entries = store.redis.xrange(store.key(job_id, "events"))
    return [json.loads(f[b"data"]) for _, f in entries if f[b"type"] == b"message_received"]


# -- which round reads it --------------------------------------------------------------------------


def test_a_message_before_the_leading_call_is_claimed_opens_that_round(store: JobStore) -> None:
    dual(store)
    answer = message_job(store, JOB, HINT, "k1")
    assert answer == {"job_id": JOB, "accepted": True, "message_id": f"{JOB}:message:0001", "round": 0}
    stored = person_messages(store)
    assert list(stored) == [f"0:person:{JOB}:message:0001"]
    message = stored[f"0:person:{JOB}:message:0001"]
    assert (message.content, message.round, message.message_id) == (HINT, 0, f"{JOB}:message:0001")
    [event] = received(store)
    assert event == {"message_id": f"{JOB}:message:0001", "round": 0, "text": HINT}
    typed = store.read_events(JOB)[-1]
    assert isinstance(typed, MessageReceived) and typed.text == HINT


def test_a_message_after_the_leading_call_began_waits_for_the_next_round(store: JobStore) -> None:
    dual(store)
    claim = store.machine.claim(JOB, 0, "thinker", LEASE, 5)
    assert isinstance(claim, Claim)  # the Thinker's call of round 0 may be under way: round 1 reads it
    assert message_job(store, JOB, HINT, "k1")["round"] == 1
    assert store.machine.transition(claim, (0, "actor", 0, ""), [], [("0:thinker", "{}")], tx="t0")
    assert message_job(store, JOB, "second", "k2")["round"] == 1  # the Actor's turn: round 1 too
    assert [m.message_id for m in person_messages(store).values()] == [
        f"{JOB}:message:0001",
        f"{JOB}:message:0002",
    ]


def test_a_job_not_started_yet_reads_the_message_in_its_first_round(store: JobStore) -> None:
    store.mark_queued(JOB, "dual")  # submitted: no worker took it yet
    assert message_job(store, JOB, HINT, "k1")["round"] == 0
    assert list(person_messages(store)) == [f"0:person:{JOB}:message:0001"]
    assert 0 < store.redis.ttl(store.key(JOB, "memory")) <= store.redis.ttl(store.key(JOB, "state"))


def test_a_parked_job_reads_the_message_in_the_round_after_its_pause(store: JobStore) -> None:
    park(store)  # a mono job awaiting approval in round 2
    answer = message_job(store, JOB, HINT, "k1")
    assert answer["accepted"] is True and answer["round"] == 3
    assert store.machine.record(JOB)["state"] == "awaiting_approval"  # the pause is untouched


# -- once per key, refusals add nothing ---------------------------------------------------------------


def test_a_repeated_key_gets_the_first_answer_and_adds_nothing(store: JobStore) -> None:
    dual(store)
    first = message_job(store, JOB, HINT, "same")
    again = message_job(store, JOB, "a different text under the same key", "same")
    assert again == first
    assert len(person_messages(store)) == 1 and len(received(store)) == 1


def test_an_ended_job_refuses_a_message(store: JobStore) -> None:
    dual(store)
    store.redis.hset(store.key(JOB, "state"), "state", "completed")
    answer = message_job(store, JOB, HINT, "k1")
    assert (answer["accepted"], answer["reason"]) == (False, "ended")
    assert "completed" in answer["error"] and "follow up" in answer["error"]
    assert person_messages(store) == {} and received(store) == []
    assert not store.redis.exists(messages_key(store.prefix, JOB))


@pytest.mark.parametrize(
    ("job_id", "text", "reason"),
    [
        pytest.param("nope", HINT, "unknown", id="unknown-job"),
        pytest.param(JOB, "", "invalid", id="empty-text"),
        pytest.param(JOB, "   ", "invalid", id="blank-text"),
        pytest.param(JOB, 42, "invalid", id="text-not-a-string"),
        pytest.param(JOB, "x" * 101, "invalid", id="text-over-the-limit"),
    ],
)
def test_refusals_say_why_and_add_nothing(store: JobStore, job_id: str, text: Any, reason: str) -> None:
    dual(store)
    answer = message_job(store, job_id, text, "k1", max_chars=100)
    assert (answer["accepted"], answer["reason"]) == (False, reason)
    assert answer["error"]
    assert person_messages(store) == {} and received(store) == []


def test_another_tenants_job_is_refused_as_unknown(store: JobStore) -> None:
    dual(store, owner="team-a")
    answer = message_job(store, JOB, HINT, "k1", owner="team-b")
    assert (answer["accepted"], answer["reason"]) == (False, "unknown")
    assert person_messages(store) == {}
    assert message_job(store, JOB, HINT, "k1", owner="team-a")["accepted"] is True


def test_the_text_is_redacted_in_memory_and_event(store: JobStore) -> None:
    dual(store)
    message_job(store, JOB, "use password: hunter22 for the login", "k1")
    [stored] = person_messages(store).values()
    assert "hunter22" not in stored.content and "***" in stored.content
    assert "hunter22" not in received(store)[0]["text"]


def test_everything_written_has_the_jobs_ttl(store: JobStore) -> None:
    dual(store)
    message_job(store, JOB, HINT, "k1")
    job_ttl = store.redis.ttl(store.key(JOB, "state"))
    assert job_ttl > 0
    for key in (store.key(JOB, "memory"), store.key(JOB, "events"), messages_key(store.prefix, JOB)):
        assert 0 < store.redis.ttl(key) <= job_ttl, key
        assert "{" + JOB + "}" in key


# -- the client ----------------------------------------------------------------------------------


class _Late:
    """A Celery app whose task never answers in time: the client withdraws its message."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, kwargs: dict[str, Any]) -> _Late:
        self.sent.append({"name": name, **kwargs})
        return self

    def get(self, timeout: float) -> Any:
        raise CeleryTimeoutError()


def test_a_message_no_worker_took_in_time_is_withdrawn_for_good(store: JobStore) -> None:
    dual(store)
    late = _Late()
    handle = JobHandle(JOB, store, late)  # type: ignore[arg-type]
    with pytest.raises(MessageRefused) as refused:
        handle.message(HINT, idempotency_key="k1", timeout=0.1)
    assert refused.value.reason == "withdrawn"
    [sent] = late.sent
    assert (sent["name"], sent["text"], sent["idempotency_key"]) == ("tandem.message", HINT, "k1")
    late_run = message_job(store, JOB, HINT, "k1")  # the queued task runs after all: nothing added
    assert (late_run["accepted"], late_run["reason"]) == (False, "withdrawn")
    assert person_messages(store) == {}


# -- the leading model reads it -----------------------------------------------------------------------


def _person(round_no: int, seq: int, text: str) -> ModelMessage:
    return ModelMessage(role="person", round=round_no, content=text, message_id=f"j:message:{seq:04d}")


def _said(chat: list[dict[str, str]], text: str) -> int:
    return sum(m["content"].count(text) for m in chat)


def test_the_thinker_reads_a_message_from_its_round_on_and_the_dual_actor_does_not() -> None:
    task = Task(goal="g", max_rounds=5)
    memory = InMemoryReasonerMemory(
        [
            ModelMessage(role="thinker", round=0, content="<instruction>a</instruction>"),
            ModelMessage(role="actor", round=0, content="done a"),
            _person(1, 1, HINT),
        ]
    )
    history = memory.get_messages()
    plan = DualPlan()
    assert _said(plan.thinker_view(task, history, 0), HINT) == 0
    round1 = plan.thinker_view(task, history, 1)
    assert _said(round1, HINT) == 1
    assert round1[-1]["content"].index(HINT) < round1[-1]["content"].index("[Round 2")
    history.append(ModelMessage(role="thinker", round=1, content="<instruction>b</instruction>"))
    history.sort(key=lambda m: (m.round, {"person": -1, "thinker": 0, "actor": 1, "tool": 2}[m.role]))
    assert _said(plan.actor_view(task, history, 1), HINT) == 0
    assert _said(plan.thinker_view(task, history, 2), HINT) == 1  # it stays in the conversation


def test_mono_and_react_models_read_the_message_once_at_its_round() -> None:
    task = Task(goal="g", max_rounds=5)
    history = InMemoryReasonerMemory(
        [
            ModelMessage(role="actor", round=0, content="step 0"),
            _person(1, 1, HINT),
            _person(1, 2, "and be brief"),
        ]
    ).get_messages()
    assert [m.content for m in history if m.role == "person"] == [HINT, "and be brief"]
    for view in (
        lambda r: MonoPlan().actor_view(task, history, r),
        lambda r: ReActPlan().view(task, history, r),
        lambda r: ReActPlan(function_calling="prompt").view(task, history, r),
    ):
        assert _said(view(0), HINT) == 0
        assert _said(view(1), HINT) == 1 and _said(view(2), HINT) == 1
        assert _said(view(1), "and be brief") == 1


def test_a_message_waiting_for_its_round_is_not_a_round_used() -> None:
    memory = InMemoryReasonerMemory([ModelMessage(role="actor", round=0, content="x"), _person(1, 1, HINT)])
    assert rounds_used(memory) == 1
    assert MonoPlan().outcome(memory, "completed").rounds == 1


class _Worker:
    """A Celery app whose ``tandem.message`` runs at once, as a worker would."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def send_task(self, name: str, kwargs: dict[str, Any]) -> Any:
        assert name == "tandem.message"
        answer = message_job(self.store, **kwargs)
        return type("Sent", (), {"get": lambda _self, timeout: answer})()


def test_the_handle_sends_messages_sync_and_async(store: JobStore) -> None:
    dual(store)
    handle = JobHandle(JOB, store, _Worker(store))  # type: ignore[arg-type]
    first = handle.message(HINT, idempotency_key="h1")
    assert asyncio.run(handle.amessage(HINT, idempotency_key="h1")) == first
    assert asyncio.run(handle.amessage("and be brief")) == f"{JOB}:message:0002"
    store.redis.hset(store.key(JOB, "state"), "state", "cancelled")
    with pytest.raises(MessageRefused, match="has ended"):
        asyncio.run(handle.amessage("late"))
    assert len(person_messages(store)) == 2
