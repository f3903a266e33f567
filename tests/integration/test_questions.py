"""Questions to a person on real workers: a tool call asks (the built-in ``ask_person``, or a
tool's ``ToolCallContext.ask``), the job parks holding no worker, and an answer resumes it.

The mono jobs follow a plan (``tests.integration.plan_model``): round 0 calls the asking tool,
round 1 delivers. The workers load ``questions_toolkit``, whose ``book_trip`` asks for a city.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.client.handle import JobHandle
from tandem.tasks.errors import InvalidAnswer, StalePauseError
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_decide import any_host, bare_client, idle, seen_by_model
from tests.integration.test_durability import runs, wait_for
from tests.integration.webhook_receiver import Receiver
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
FAST = {
    "TANDEM_STALL_SECONDS": "1",
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_WEBHOOK_SECRET": "test-webhook-secret-0123456789abcdef",
}
COLOUR = {"type": "string", "enum": ["teal-4471", "amber-9032"]}
ASK_COLOUR = [[{"name": "ask_person", "args": {"question": "Which colour?", "answer_schema": COLOUR}}]]
BOOK = [[{"name": "book_trip", "args": {}}]]


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(redis_base, TANDEM_TOOLKIT="tests.integration.tools:questions_toolkit", **FAST)
    hosts = next(clusters)
    hosts[2].set_script(any_host)
    hosts[0].start("thinker", "actor", "tools")
    yield hosts
    next(clusters, None)


def submit(cluster: Cluster, plan: Any, **spec: Any) -> JobHandle:
    return cluster.submit(goal=goal_with_plan("questions", plan), reasoner="mono", max_rounds=4, **spec)


def asked(handle: JobHandle, timeout: float = 60) -> str:
    """Wait until the job waits on a question; its pause id."""
    wait_for(
        lambda: handle.status().state == "awaiting_approval" and handle.status().pause_kind == "question",
        timeout,
        f"a question of {handle.id}",
    )
    pause = handle.status().pause_id
    assert pause is not None
    return pause


def test_a_parked_question_holds_no_worker_and_an_answer_reaches_the_model(cluster: Hosts) -> None:
    c, _, actor = cluster
    handle = submit(c, ASK_COLOUR, ask_person=True)
    pause = asked(handle)
    status = handle.status()
    assert status.question is not None and status.question["text"] == "Which colour?"
    assert status.question["answer_schema"] == COLOUR and status.question["tool"] == "ask_person"
    assert pause == f"{handle.id}:0:tools:1"
    wait_for(
        lambda: idle(c) == (0, {k: [] for k in idle(c)[1]}), EVENT_SECONDS, "nothing queued, no task running"
    )
    queued, active = idle(c)
    assert queued == 0 and all(tasks == [] for tasks in active.values()), (queued, active)
    [event] = [e.data for e in c.store.read_events(handle.id) if e.type == "question_asked"]
    assert (event["pause_id"], event["question"], event["answer_schema"]) == (pause, "Which colour?", COLOUR)

    assert handle.answer("teal-4471") == "teal-4471"  # names the current pause itself
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert seen_by_model(actor, "teal-4471")  # the model read the answer as ask_person's result
    [answered] = [e.data for e in handle.events() if e.type == "question_answered"]
    assert (answered["pause_id"], answered["by"], answered["answer"]) == (pause, "person", "teal-4471")
    memory = [m for m in c.store.memory(handle.id).get_messages() if m.function_results]
    assert memory[0].function_results[0].output == "teal-4471"


def test_stale_and_unfitting_answers_change_nothing_and_a_bare_client_answers(cluster: Hosts) -> None:
    c, _, _ = cluster
    handle = submit(c, BOOK)
    pause = asked(handle)
    with pytest.raises(StalePauseError) as stale:
        handle.answer({"city": "Oslo"}, pause_id=f"{handle.id}:0:tools:7")
    assert stale.value.current_pause == pause
    with pytest.raises(
        InvalidAnswer, match="does not fit its schema: field 'city': 7 is not of type 'string'"
    ):
        handle.answer({"city": 7}, pause_id=pause)
    still = handle.status()
    assert (still.state, still.pause_id) == ("awaiting_approval", pause)
    assert handle.pending_question().answered_by is None  # type: ignore[union-attr]
    assert [r.get("city", "-") for r in runs(c, handle.id, "book_trip")] == []  # never booked

    reply = (
        bare_client(c)
        .send_task(
            "tandem.answer",
            kwargs={
                "job_id": handle.id,
                "pause_id": pause,
                "answer": {"city": "Oslo"},
                "idempotency_key": "k1",
            },
        )
        .get(timeout=RESULT_SECONDS)
    )
    assert reply["accepted"] is True and reply["answer"] == {"city": "Oslo"}, reply
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]  # booked once, after the answer
    again = (
        bare_client(c)
        .send_task(
            "tandem.answer", kwargs={"job_id": handle.id, "pause_id": pause, "answer": {"city": "Rome"}}
        )
        .get(timeout=RESULT_SECONDS)
    )
    assert again["accepted"] is False and again["reason"] in ("stale_pause", "refused"), again


def test_no_answer_in_time_fails_the_question_and_the_job_goes_on(cluster: Hosts) -> None:
    c, _, actor = cluster
    handle = submit(c, BOOK, answer_timeout_s=2)
    pause = asked(handle)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == [None]
    assert seen_by_model(actor, "booked nothing: no answer within 2 s")
    [answered] = [e.data for e in handle.events() if e.type == "question_answered"]
    assert (answered["pause_id"], answered["by"]) == (pause, "timeout")
    with pytest.raises(StalePauseError):
        handle.answer({"city": "Oslo"}, pause_id=pause)


def test_two_questions_in_one_reply_are_asked_one_after_the_other(cluster: Hosts) -> None:
    c, _, actor = cluster
    two = [[{"name": "ask_person", "args": {"question": q}} for q in ("First name?", "Last name?")]]
    handle = submit(c, two, ask_person=True)
    first = asked(handle)
    text = handle.status().question["text"]  # type: ignore[index]
    handle.answer(f"answer-to-{text}", pause_id=first)
    second = wait_for(
        lambda: handle.status().pause_kind == "question" and handle.status().pause_id != first, 60, "pause 2"
    )
    assert second
    other = handle.status().question["text"]  # type: ignore[index]
    assert {text, other} == {"First name?", "Last name?"}
    handle.answer(f"answer-to-{other}")
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert seen_by_model(actor, "answer-to-First name?") and seen_by_model(actor, "answer-to-Last name?")


def test_a_question_sends_the_waiting_for_person_webhook(cluster: Hosts) -> None:
    c, _, _ = cluster
    with Receiver(lambda request: 204) as receiver:
        hooks = [{"url": receiver.url, "events": ["waiting_for_person"]}]
        handle = submit(c, BOOK, webhooks=hooks)
        pause = asked(handle)
        wait_for(
            lambda: receiver.of(handle.id, "waiting_for_person"),
            EVENT_SECONDS,
            "the waiting_for_person delivery",
        )
        [posted] = receiver.of(handle.id, "waiting_for_person")
    body = json.loads(posted["body"])
    assert (body["pause_id"], body["reason"], body["state"]) == (pause, "question_asked", "awaiting_approval")
    assert body["pause"]["question"] == "Which city should the trip go to?"
    handle.answer({"city": "Oslo"})
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"


def test_a_question_asked_during_an_approval_comes_as_soon_as_the_decision(redis_base: str) -> None:
    """``book_trip`` (free) asks while ``notify`` waits for approval: it is released, and the
    decision sends it again at once. The stall is 60 s here, so the reconciler could not have."""
    clusters = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.tools:questions_toolkit",
        TANDEM_STALL_SECONDS="60",
        TANDEM_LEASE_SECONDS="2",
    )
    c, _, actor = next(clusters)
    try:
        actor.set_script(any_host)
        c.start("actor", "tools")
        plan = [[{"name": "book_trip", "args": {}}, {"name": "notify", "args": {"to": "ops"}}]]
        handle = submit(c, plan)
        state = c.store.key(handle.id, "state")
        wait_for(
            lambda: c.redis.hget(state, "asking") == b"0|,1,", 60, "book_trip asking during the approval"
        )
        assert handle.status().pause_kind == "approval"
        handle.approve()
        pause = asked(handle, timeout=20)  # well within the 60 s stall
        handle.answer({"city": "Oslo"}, pause_id=pause)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]
        assert len(runs(c, handle.id, "notify")) == 1
        assert c.exited() == []
    finally:
        next(clusters, None)
