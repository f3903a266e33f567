"""Trying to break the promises of docs/questions.md and of ``POST /v1/jobs/{id}/answers``
(docs/api.md) on real ``celery worker`` processes, a real Redis and a real ``tandem api``.

What must hold, read from the docs: an answer applies once per idempotency key and the call runs
again once; an answer for another pause (or an ended one) is refused and changes nothing; an answer
that does not fit the schema is refused with the field named; a timeout and a late answer give
exactly one outcome; killed workers lose nothing and do not ask twice; a cancelled parked job ends
cancelled and holds nothing; a job's secrets are masked in its question events; keys have TTLs.

The mono jobs follow a plan (``tests.integration.plan_model``): round 0 calls the asking tool,
round 1 delivers. The workers load ``tests.integration.breaking_question_tools``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from tandem.client.handle import JobHandle
from tandem.tasks.errors import DecisionTimeout, StalePauseError
from tests.integration.conftest import RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_api import ApiProcess
from tests.integration.test_decide import any_host, idle
from tests.integration.test_durability import runs, wait_for
from tests.integration.webhook_receiver import Receiver
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

TOKEN_A = "team-a-token-0123456789abcdef"
TOKEN_B = "team-b-token-0123456789abcdef"
SCOPES = ["submit", "read", "control", "approve"]
TOKENS = {TOKEN_A: {"tenant": "team-a", "scopes": SCOPES}, TOKEN_B: {"tenant": "team-b", "scopes": SCOPES}}
ENV = {
    "TANDEM_TOOLKIT": "tests.integration.breaking_question_tools:toolkit",
    "TANDEM_STALL_SECONDS": "1",
    "TANDEM_LEASE_SECONDS": "2",
    "TANDEM_TOOL_TIMEOUT": "15",
    "TANDEM_API_TOKENS": json.dumps(TOKENS),
    "TANDEM_SECRETS_KEY": Fernet.generate_key().decode(),
    "TANDEM_WEBHOOK_SECRET": "breaking-questions-secret-0123456789",
}
BOOK = [[{"name": "book_trip", "args": {}}]]
SLOW = [[{"name": "slow_booking", "args": {}}]]
TRIP = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "nights": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["air", "rail"]},
        "traveller": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    "required": ["city", "mode", "traveller"],
    "additionalProperties": False,
}
ASK_TRIP = [[{"name": "ask_person", "args": {"question": "Which trip?", "answer_schema": TRIP}}]]

Setup = tuple[Cluster, OpenAIServer, ApiProcess]


@pytest.fixture(scope="module")
def setup(redis_base: str) -> Iterator[Setup]:
    clusters = _make_cluster(redis_base, **ENV)
    c, _, actor = next(clusters)
    actor.set_script(any_host)
    c.start("thinker", "actor", "tools")
    server = ApiProcess(c.env)
    try:
        yield c, actor, server
    finally:
        server.stop()
        next(clusters, None)


def submit(cluster: Cluster, plan: Any, owner: str = "team-a", **spec: Any) -> JobHandle:
    goal = goal_with_plan("questions", plan)
    handle = cluster.submit(goal=goal, reasoner="mono", max_rounds=4, owner=owner, **spec)
    assert handle.owner == owner  # the handle answers, decides and resumes as the job's tenant
    return handle


def asked(handle: JobHandle, timeout: float = RESULT_SECONDS) -> str:
    """Wait until the job waits on a question; its pause id."""
    wait_for(
        lambda: handle.status().state == "awaiting_approval" and handle.status().pause_kind == "question",
        timeout,
        f"a question of {handle.id}",
    )
    pause = handle.status().pause_id
    assert pause is not None
    return pause


def api(server: ApiProcess, token: str = TOKEN_A) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def post_answer(
    server: ApiProcess, job_id: str, body: dict[str, Any], token: str = TOKEN_A
) -> httpx.Response:
    with api(server, token) as client:
        return client.post(f"/v1/jobs/{job_id}/answers", json=body)


def together(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i in 0..n-1 from n threads released at once; their returns, in order."""
    gate = threading.Barrier(n)
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        gate.wait(10)
        out[i] = call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def events_of(cluster: Cluster, job_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in cluster.store.read_events(job_id, count=10_000) if e.type == kind]


def job_keys(cluster: Cluster, job_id: str) -> dict[str, int]:
    """Every Redis key of the job (its hash tag) and its TTL."""
    names = [k.decode() for k in cluster.redis.scan_iter(match=f"*{{{job_id}}}*")]
    return {k: int(cluster.redis.ttl(k)) for k in names}


def test_the_same_answer_sent_ten_times_at_once_applies_once(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    body = {"pause_id": pause, "answer": {"city": "Oslo"}, "idempotency_key": "same-key-1"}
    replies = together(10, lambda _: post_answer(server, handle.id, body))
    assert [r.status_code for r in replies] == [200] * 10, [r.text for r in replies]
    assert {json.dumps(r.json(), sort_keys=True) for r in replies} == {
        json.dumps(
            {"id": handle.id, "pause_id": pause, "round": 0, "call_index": 1, "answer": {"city": "Oslo"}},
            sort_keys=True,
        )
    }
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]
    assert len(runs(c, handle.id, "book_trip_run")) == 2  # the run that asked, the run that booked
    answered = events_of(c, handle.id, "question_answered")
    assert [(a["pause_id"], a["by"], a["answer"]) for a in answered] == [(pause, "person", {"city": "Oslo"})]
    assert len(events_of(c, handle.id, "question_asked")) == 1


def test_two_different_answers_racing_for_one_pause_one_wins_the_other_changes_nothing(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    cities = ["Oslo", "Rome"]
    replies = together(
        2,
        lambda i: post_answer(
            server,
            handle.id,
            {"pause_id": pause, "answer": {"city": cities[i]}, "idempotency_key": f"race-{i}"},
        ),
    )
    codes = sorted(r.status_code for r in replies)
    assert codes == [200, 409], [r.text for r in replies]
    [won] = [cities[i] for i, r in enumerate(replies) if r.status_code == 200]
    [lost] = [r.json()["error"] for r in replies if r.status_code == 409]
    assert lost["code"] in ("stale_pause", "answer_refused"), lost
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == [won]
    answered = events_of(c, handle.id, "question_answered")
    assert [(a["pause_id"], a["answer"]) for a in answered] == [(pause, {"city": won})]


def test_answers_to_unknown_foreign_and_ended_jobs_are_refused_and_create_no_key(setup: Setup) -> None:
    c, _, server = setup
    ghost = "job-that-never-was-0001"
    reply = post_answer(server, ghost, {"pause_id": f"{ghost}:0:tools:1", "answer": {"city": "Oslo"}})
    assert (reply.status_code, reply.json()["error"]["code"]) == (404, "unknown_job"), reply.text
    assert job_keys(c, ghost) == {}

    handle = submit(c, BOOK)
    pause = asked(handle)
    before = job_keys(c, handle.id)
    foreign = post_answer(
        server, handle.id, {"pause_id": pause, "answer": {"city": "Rome"}, "idempotency_key": "b-1"}, TOKEN_B
    )
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "unknown_job"), foreign.text
    assert set(job_keys(c, handle.id)) == set(before)
    assert c.redis.hget(c.store.key(handle.id, "decisions"), "b-1") is None
    still = handle.status()
    assert (still.state, still.pause_id) == ("awaiting_approval", pause)

    handle.answer({"city": "Oslo"}, pause_id=pause)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    ended = job_keys(c, handle.id)
    late = post_answer(
        server, handle.id, {"pause_id": pause, "answer": {"city": "Rome"}, "idempotency_key": "late-1"}
    )
    assert late.status_code == 409, late.text
    assert set(job_keys(c, handle.id)) == set(ended)
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]
    assert len(events_of(c, handle.id, "question_answered")) == 1


@pytest.mark.parametrize(
    ("answer", "field", "words"),
    [
        ({"city": 7, "mode": "air", "traveller": {"name": "Ann"}}, "city", "is not of type 'string'"),
        ({"city": "Oslo", "mode": "car", "traveller": {"name": "Ann"}}, "mode", "'car' is not one of"),
        ({"city": "Oslo", "mode": "air"}, "traveller", "required"),
        ({"city": "Oslo", "mode": "air", "traveller": {"name": 7}}, "traveller/name", "not of type 'string'"),
        ({"city": "Oslo", "mode": "air", "traveller": {}}, "name", "required"),
        ({"city": "Oslo", "mode": "air", "traveller": {"name": "A"}, "nights": 0}, "nights", "minimum"),
        ({"city": "Oslo", "mode": "air", "traveller": {"name": "A"}, "nights": 1.5}, "nights", "integer"),
        ({"city": "Oslo", "mode": "air", "traveller": {"name": "A"}, "pet": "cat"}, "pet", "pet"),
        ("Oslo", None, "not of type 'object'"),
        (None, None, "not of type 'object'"),
    ],
)
def test_an_answer_that_breaks_the_schema_is_refused_naming_the_field(
    setup: Setup, answer: Any, field: str | None, words: str
) -> None:
    c, _, server = setup
    handle = submit(c, ASK_TRIP, ask_person=True)
    pause = asked(handle)
    reply = post_answer(server, handle.id, {"pause_id": pause, "answer": answer, "idempotency_key": "bad-1"})
    assert reply.status_code == 422, reply.text
    error = reply.json()["error"]
    assert error["code"] == "invalid_answer", error
    assert "does not fit its schema" in error["message"] and words in error["message"], error
    if field is not None:
        assert f"'{field}'" in error["message"], error
    still = handle.status()
    assert (still.state, still.pause_id) == ("awaiting_approval", pause)
    assert events_of(c, handle.id, "question_answered") == []
    good = {"city": "Oslo", "mode": "rail", "traveller": {"name": "Ann"}}
    ok = post_answer(server, handle.id, {"pause_id": pause, "answer": good, "idempotency_key": "good-1"})
    assert ok.status_code == 200, ok.text
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    answered = events_of(c, handle.id, "question_answered")
    assert [(a["by"], a["answer"]) for a in answered] == [("person", good)]


def test_a_timeout_racing_a_late_answer_gives_exactly_one_outcome(setup: Setup) -> None:
    c, _, _ = setup
    for _ in range(3):
        handle = submit(c, BOOK, answer_timeout_s=4)
        pause = asked(handle)
        question = handle.status().question
        assert question is not None and question.get("until") is not None, question
        time.sleep(max(0.0, float(question["until"]) - time.time()))  # answer right when the timeout is due
        try:
            handle.answer({"city": "Oslo"}, pause_id=pause)
            outcome = "person"
        except StalePauseError:
            outcome = "timeout"
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        answered = events_of(c, handle.id, "question_answered")
        assert [(a["pause_id"], a["by"]) for a in answered] == [(pause, outcome)], (outcome, answered)
        expected = "Oslo" if outcome == "person" else None
        assert [r["city"] for r in runs(c, handle.id, "book_trip")] == [expected]


def test_a_job_cancelled_while_it_waits_on_a_question_ends_cancelled_and_holds_nothing(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    handle.cancel()
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "cancelled", result
    wait_for(lambda: idle(c)[0] == 0, RESULT_SECONDS, "nothing queued")
    queued, active = idle(c)
    assert queued == 0 and all(tasks == [] for tasks in active.values()), (queued, active)
    late = post_answer(server, handle.id, {"pause_id": pause, "answer": {"city": "Oslo"}})
    assert late.status_code == 409, late.text
    assert runs(c, handle.id, "book_trip") == []
    assert events_of(c, handle.id, "question_answered") == []
    assert all(ttl > 0 for ttl in job_keys(c, handle.id).values()), job_keys(c, handle.id)


def test_an_answer_racing_a_cancel_runs_the_call_at_most_once_and_ends_once(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    body = {"pause_id": pause, "answer": {"city": "Oslo"}, "idempotency_key": "vs-cancel"}
    replies = together(2, lambda i: post_answer(server, handle.id, body) if i == 0 else handle.cancel())
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status in ("cancelled", "completed"), result
    answered = events_of(c, handle.id, "question_answered")
    if replies[0].status_code == 200:
        assert [(a["pause_id"], a["answer"]) for a in answered] == [(pause, {"city": "Oslo"})]
    else:
        assert replies[0].status_code == 409 and answered == [], (replies[0].text, answered)
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] in ([], ["Oslo"])
    finals = [e for e in c.store.read_events(handle.id, count=10_000) if e.type == "final"]
    assert len(finals) == 1, finals
    wait_for(lambda: idle(c)[0] == 0, RESULT_SECONDS, "nothing queued")


def test_a_job_resumed_after_a_cancel_on_a_question_asks_again_and_takes_one_answer(setup: Setup) -> None:
    c, _, _ = setup
    handle = submit(c, BOOK)
    first = asked(handle)
    handle.cancel()
    assert handle.result(timeout=RESULT_SECONDS).status == "cancelled"
    resumed = handle.resume()
    second = asked(resumed)
    again = resumed.status().question
    assert again is not None and again["text"] == "Which city should the trip go to?", again
    resumed.answer({"city": "Bergen"}, pause_id=second)
    assert resumed.result(timeout=RESULT_SECONDS).status == "completed"
    assert [r["city"] for r in runs(c, resumed.id, "book_trip")] == ["Bergen"]
    if resumed.id == handle.id:
        assert second != first
    with pytest.raises(StalePauseError):
        resumed.answer({"city": "Rome"}, pause_id=second)


def test_the_jobs_secret_is_masked_in_the_question_and_the_answer(setup: Setup) -> None:
    c, _, _ = setup
    token = "tok-9f8e7d6c5b4a39281706"
    plan = [[{"name": "secret_question", "args": {}}]]
    handle = submit(c, plan, secrets={"api_token": token})
    pause = asked(handle)
    handle.answer(f"yes, {token} is right", pause_id=pause)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    [record] = runs(c, handle.id, "secret_question")
    assert record["answer"] == f"yes, {token} is right"  # the tool got the answer whole
    [asked_event] = events_of(c, handle.id, "question_asked")
    [answered] = events_of(c, handle.id, "question_answered")
    assert token not in json.dumps(asked_event) and "***" in asked_event["question"], asked_event
    assert token not in json.dumps(answered), answered
    everything = json.dumps([e.data for e in c.store.read_events(handle.id, count=10_000)])
    assert token not in everything


def test_the_jobs_secret_is_masked_in_the_waiting_for_person_webhook_of_its_question(setup: Setup) -> None:
    c, _, _ = setup
    token = "tok-5e4d3c2b1a0f9e8d7c6b"
    plan = [[{"name": "secret_question", "args": {}}]]
    with Receiver(lambda _: 204) as receiver:
        hooks = [{"url": receiver.url, "events": ["waiting_for_person"]}]
        handle = submit(c, plan, secrets={"api_token": token}, webhooks=hooks)
        pause = asked(handle)
        delivered = lambda: receiver.of(handle.id, "waiting_for_person")  # noqa: E731
        wait_for(delivered, RESULT_SECONDS, "the waiting_for_person delivery")
        [posted] = receiver.of(handle.id, "waiting_for_person")
    body = json.loads(posted["body"])
    assert (body["pause_id"], body["reason"]) == (pause, "question_asked")
    assert token.encode() not in posted["body"] and "***" in body["pause"]["question"], body
    handle.answer("yes", pause_id=pause)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"


def test_every_key_of_a_parked_and_an_answered_job_has_a_ttl(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    parked = job_keys(c, handle.id)
    assert parked and all(ttl > 0 for ttl in parked.values()), parked
    question = c.redis.hgetall(c.store.key(handle.id, "question"))  # the question's record
    assert b"Which city should the trip go to?" in b"".join(question.values()), question
    assert c.store.key(handle.id, "question") in parked
    reply = post_answer(server, handle.id, {"answer": {"city": "Oslo"}, "idempotency_key": "t"})  # no pause
    assert reply.status_code == 200 and reply.json()["pause_id"] == pause, reply.text
    assert c.redis.hget(c.store.key(handle.id, "decisions"), "t") is not None  # the reply, kept
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    done = job_keys(c, handle.id)
    assert all(ttl > 0 for ttl in done.values()), done


def test_the_same_key_with_another_answer_gets_the_first_reply_and_changes_nothing(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, BOOK)
    pause = asked(handle)
    with api(server) as client:
        path, key = f"/v1/jobs/{handle.id}/answers", {"Idempotency-Key": "header-key-7"}
        first = client.post(path, json={"pause_id": pause, "answer": {"city": "Oslo"}}, headers=key)
        assert first.status_code == 200, first.text
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        again = client.post(path, json={"pause_id": pause, "answer": {"city": "Rome"}}, headers=key)
    assert (again.status_code, again.json()) == (200, first.json())
    assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]
    assert [a["answer"] for a in events_of(c, handle.id, "question_answered")] == [{"city": "Oslo"}]


def test_an_answer_naming_an_approval_pause_is_refused_and_decides_nothing(setup: Setup) -> None:
    c, _, server = setup
    handle = submit(c, [[{"name": "notify", "args": {"to": "ops"}}]])
    wait_for(lambda: handle.status().pause_kind == "approval", RESULT_SECONDS, "the approval pause")
    pause = handle.status().pause_id
    reply = post_answer(server, handle.id, {"pause_id": pause, "answer": "yes"})
    assert reply.status_code == 409, reply.text
    assert reply.json()["error"]["code"] in ("stale_pause", "answer_refused"), reply.text
    still = handle.status()
    assert (still.state, still.pause_id, still.pause_kind) == ("awaiting_approval", pause, "approval")
    assert [p.tool for p in still.pending_approval or []] == ["notify"]
    assert runs(c, handle.id, "notify") == []
    assert events_of(c, handle.id, "question_answered") == []
    handle.approve(pause_id=pause)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert len(runs(c, handle.id, "notify")) == 1


def test_the_cli_answers_text_as_text_and_a_stale_answer_exits_2(setup: Setup) -> None:
    c, _, _ = setup
    handle = submit(
        c, [[{"name": "ask_person", "args": {"question": "Any value?"}}]], owner="default", ask_person=True
    )
    pause = asked(handle)
    cli = [sys.executable, "-m", "tandem.workers.cli", "answer", handle.id]
    env = {k: v for k, v in c.env.items() if k != "TANDEM_API_TOKENS"}

    ok = subprocess.run(
        [*cli, "42", "--text", "--pause", pause],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [a["answer"] for a in events_of(c, handle.id, "question_answered")] == ["42"]
    stale = subprocess.run(
        [*cli, "43", "--pause", pause], env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    assert stale.returncode == 2, (stale.stdout, stale.stderr)
    assert stale.stderr.count("\n") == 1 and "tandem:" in stale.stderr, stale.stderr
    assert [a["answer"] for a in events_of(c, handle.id, "question_answered")] == ["42"]


def test_an_answer_no_worker_took_in_time_is_withdrawn_and_never_applies(redis_base: str) -> None:
    clusters = _make_cluster(redis_base, **ENV)
    c, _, actor = next(clusters)
    try:
        actor.set_script(any_host)
        first = c.start("thinker", "actor", "tools", name="first")
        handle = submit(c, BOOK)
        pause = asked(handle)
        c.stop_group(first)  # a parked job needs no worker; the answer finds none
        with pytest.raises(DecisionTimeout):
            handle.answer({"city": "Rome"}, pause_id=pause, timeout=3)
        c.start("thinker", "actor", "tools", name="second")
        wait_for(lambda: idle(c)[0] == 0, RESULT_SECONDS, "the withdrawn answer's message to be consumed")
        time.sleep(3)  # the reconciler's sweeps (stall 1 s) would send the call again now
        still = handle.status()
        assert (still.state, still.pause_id) == ("awaiting_approval", pause)
        assert events_of(c, handle.id, "question_answered") == []
        assert runs(c, handle.id, "book_trip") == []
        handle.answer({"city": "Oslo"}, pause_id=pause)
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        assert [r["city"] for r in runs(c, handle.id, "book_trip")] == ["Oslo"]
    finally:
        next(clusters, None)


def test_a_call_asking_two_questions_gets_each_answer_in_turn_and_books_once(setup: Setup) -> None:
    c, _, _ = setup
    handle = submit(c, [[{"name": "two_questions", "args": {}}]])
    first = asked(handle)
    assert handle.status().question["text"] == "Which city?"  # type: ignore[index]
    handle.answer("Oslo", pause_id=first)
    second = wait_for(
        lambda: handle.status().pause_kind == "question" and handle.status().pause_id not in (None, first),
        RESULT_SECONDS,
        "the second question",
    )
    assert second
    second_pause = handle.status().pause_id
    assert handle.status().question["text"] == "How many nights in Oslo?"  # type: ignore[index]
    with pytest.raises(StalePauseError):  # the first pause is over: its answer cannot be changed
        handle.answer("Rome", pause_id=first)
    handle.answer(3, pause_id=second_pause)
    assert handle.result(timeout=RESULT_SECONDS).status == "completed"
    assert [(r["city"], r["nights"]) for r in runs(c, handle.id, "two_questions")] == [("Oslo", 3)]
    answered = events_of(c, handle.id, "question_answered")
    assert [(a["pause_id"], a["answer"]) for a in answered] == [(first, "Oslo"), (second_pause, 3)]
    assert len(events_of(c, handle.id, "question_asked")) == 2


def test_an_at_most_once_tool_may_ask_and_its_side_effect_runs_once(setup: Setup) -> None:
    c, _, _ = setup
    handle = submit(c, [[{"name": "once_asking", "args": {}}]])
    pause = asked(handle)
    handle.answer(125, pause_id=pause)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert [r["amount"] for r in runs(c, handle.id, "once_asking")] == [125]
    memory = [m for m in c.store.memory(handle.id).get_messages() if m.function_results]
    assert memory[0].function_results[0].output == "charged 125"


def test_time_parked_on_a_question_does_not_count_towards_the_jobs_timeout(setup: Setup) -> None:
    c, _, _ = setup
    handle = submit(c, BOOK, timeout_s=5)
    pause = asked(handle)
    time.sleep(8)  # longer than the job's whole timeout, parked
    still = handle.status()
    assert (still.state, still.pause_id) == ("awaiting_approval", pause), still
    handle.answer({"city": "Oslo"}, pause_id=pause)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result


def test_killed_tools_workers_while_parked_and_after_the_answer_lose_nothing_and_ask_once(
    redis_base: str,
) -> None:
    clusters = _make_cluster(redis_base, **ENV)
    c, _, actor = next(clusters)
    try:
        actor.set_script(any_host)
        c.start("thinker", "actor", name="models")
        tools = c.start("tools", name="tools-1")
        handle = submit(c, SLOW)
        pause = asked(handle)
        c.kill(tools, "tools")  # parked: no worker holds it, killing one loses nothing
        tools = c.start("tools", name="tools-2")
        handle.answer({"city": "Tromso"}, pause_id=pause)
        answered_run = lambda: runs(c, handle.id, "slow_booking_answered")  # noqa: E731
        wait_for(answered_run, RESULT_SECONDS, "the answered run to start")
        c.kill(tools, "tools")  # mid-run, after the answer
        c.start("tools", name="tools-3")
        assert handle.result(timeout=RESULT_SECONDS).status == "completed"
        assert {r["city"] for r in runs(c, handle.id, "slow_booking")} == {"Tromso"}
        assert len(events_of(c, handle.id, "question_asked")) == 1  # the answer was kept: no second question
        answered = events_of(c, handle.id, "question_answered")
        assert [(a["pause_id"], a["answer"]) for a in answered] == [(pause, {"city": "Tromso"})]
        assert {r["city"] for r in runs(c, handle.id, "slow_booking_answered")} == {"Tromso"}
    finally:
        next(clusters, None)
