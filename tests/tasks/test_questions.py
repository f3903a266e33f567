"""Questions on workers over fakeredis: a tool call parks its job on a question (``ask.lua``),
``QuestionStore`` answers it (``answer.lua``: the pause check, the schema check, the key), the
timeout, the job's status, and ``WorkerAsker`` giving the stored answer to the call's next run.

The job of every test is a mono job in round 2 whose Actor reply made 2 calls; call 1 asks.
"""

from __future__ import annotations

import json
from typing import Any

import fakeredis
import pytest

from tandem.tasks.control.answer import answer_job
from tandem.tasks.control.questions import QuestionPending, QuestionStore, WorkerAsker, answer_of
from tandem.tasks.errors import InvalidAnswer, StalePauseError
from tandem.tasks.state.claims import Claim, ClaimRefused
from tandem.tasks.state.store import JobStore
from tandem.toolkit.context import Question
from tandem.toolkit.errors import NoAnswer

JOB = "job"
LEASE = 30.0
PAUSE = "job:2:tools:1"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


def start_round(store: JobStore, job_id: str = JOB, spec: str = '{"goal": "g"}') -> None:
    """Create the job (``spec``: its JSON) and move it to round 2's tool step (2 calls)."""
    machine = store.machine
    assert machine.create(job_id, spec, "mono", (2, "actor"), [], timeout=3600, ttl_after=600)
    claim = machine.claim(job_id, 2, "actor", LEASE, 5)
    assert isinstance(claim, Claim)
    calls = [{"task": "tandem.run_tool", "args": [job_id, 2, i]} for i in (1, 2)]
    assert machine.transition(claim, (2, "tools", 2, ""), calls, [("2:actor", "{}")], tx="t")


def ask(store: JobStore, timeout_s: float = 60, index: int = 1, job_id: str = JOB) -> str:
    """Call ``index`` runs and asks for a city: what parking answered."""
    claim = store.machine.claim_call(job_id, 2, index, LEASE, 5)
    assert isinstance(claim, Claim), claim
    question = Question(text="Which city?", answer_schema=CITY, round=2, call_index=index)
    return QuestionStore(store).park(claim, QuestionPending(question, "book_trip"), timeout_s)


@pytest.fixture
def questions(store: JobStore) -> QuestionStore:
    start_round(store)
    assert ask(store) == "parked"
    return QuestionStore(store)


def events(store: JobStore, kind: str) -> list[dict[str, Any]]:
    entries = store.redis.xrange(store.key(JOB, "events"))
    return [json.loads(f[b"data"]) for _, f in entries if f[b"type"].decode() == kind]


def test_a_question_parks_the_job_and_holds_its_call(questions: QuestionStore, store: JobStore) -> None:
    rec = store.machine.record(JOB)
    assert (rec["state"], rec["pause_kind"], rec["held"], rec["pause_seq"]) == (
        "awaiting_approval",
        "question",
        ",1,",
        "1",
    )
    assert store.machine.claim_call(JOB, 2, 1, LEASE, 5) == ClaimRefused("held")
    status = store.status(JOB)
    assert status is not None and (status.pause_kind, status.pause_id) == ("question", PAUSE)
    assert status.question is not None and status.question["text"] == "Which city?"
    assert status.pending_approval is None
    [asked] = events(store, "question_asked")
    assert (asked["pause_id"], asked["question"], asked["answer_schema"], asked["tool"]) == (
        PAUSE,
        "Which city?",
        CITY,
        "book_trip",
    )
    # The other call still runs; the count-down does not reach collect while call 1 waits.
    other = store.machine.claim_call(JOB, 2, 2, LEASE, 5)
    assert isinstance(other, Claim)
    assert store.machine.call_done(other, "{}", [{"task": "tandem.collect_tools", "args": [JOB, 2]}]) == 1
    verdict = store.machine.reconcile(JOB, stall=0.0, max_expiries=5, outbox_grace=0.0)
    assert verdict.action == "parked" and verdict.indices == ()


def test_an_answer_is_checked_stored_and_sends_the_call_again(
    questions: QuestionStore, store: JobStore
) -> None:
    reply = questions.answer(JOB, {"city": "Oslo"}, pause=PAUSE, key="k1")
    assert reply == {
        "job_id": JOB,
        "accepted": True,
        "pause_id": PAUSE,
        "round": 2,
        "call_index": 1,
        "answer": {"city": "Oslo"},
    }
    rec = store.machine.record(JOB)
    assert (rec["state"], rec["held"], rec["pause_kind"]) == ("running", "", "")
    assert store.machine.outbox(JOB)[1] == [{"task": "tandem.run_tool", "args": [JOB, 2, 1]}]
    assert questions.answer(JOB, {"city": "Rome"}, pause=PAUSE, key="k1") == reply  # same key, same reply
    claim = store.machine.claim_call(JOB, 2, 1, LEASE, 5)
    assert isinstance(claim, Claim)  # the call runs again, and its ask gets the answer at once
    asker = WorkerAsker(store, JOB, 2, 1, "book_trip")
    assert asker(Question(text="Which city?", answer_schema=CITY, round=2, call_index=1)) == {"city": "Oslo"}
    with pytest.raises(QuestionPending):  # a second question of the same call waits in turn
        asker(Question(text="Which day?", round=2, call_index=1, seq=2))
    [answered] = events(store, "question_answered")
    assert (answered["pause_id"], answered["by"], answered["answer"]) == (PAUSE, "person", {"city": "Oslo"})


def test_a_stale_or_unfitting_answer_changes_nothing(questions: QuestionStore, store: JobStore) -> None:
    before = store.machine.record(JOB)
    stale = questions.answer(JOB, {"city": "Oslo"}, pause="job:2:tools:9")
    assert (stale["accepted"], stale["reason"], stale["current_pause"]) == (False, "stale_pause", PAUSE)
    with pytest.raises(StalePauseError):
        answer_of(stale)
    bad = questions.answer(JOB, {"city": 7}, pause=PAUSE)
    assert (bad["accepted"], bad["reason"]) == (False, "invalid_answer")
    assert "field 'city': 7 is not of type 'string'" in bad["error"]
    with pytest.raises(InvalidAnswer, match="field 'city'"):
        answer_of(bad)
    assert store.machine.record(JOB) == before
    assert events(store, "question_answered") == []
    ok = questions.answer(JOB, {"city": "Oslo"})  # no pause named: the current one
    assert ok["accepted"] is True
    again = questions.answer(JOB, {"city": "Rome"}, pause=PAUSE)
    assert (again["accepted"], again["reason"]) == (False, "stale_pause")
    assert "answered already" in again["error"]


def test_no_answer_in_time_fails_the_question(store: JobStore) -> None:
    start_round(store)
    assert ask(store, timeout_s=5) == "parked"
    questions = QuestionStore(store)
    record = questions.get(JOB)
    assert record is not None
    assert questions.expire_if_due(JOB, now=record.asked_at + 1) == record  # not due yet
    expired = questions.expire_if_due(JOB, now=record.asked_at + 6)
    assert expired is not None and expired.answered_by == "timeout"
    assert store.machine.record(JOB)["state"] == "running"
    with pytest.raises(NoAnswer, match="no answer within 5 s"):
        WorkerAsker(store, JOB, 2, 1, "book_trip")(Question(text="Which city?", round=2, call_index=1))
    late = questions.answer(JOB, {"city": "Oslo"}, pause=PAUSE)
    assert (late["accepted"], late["reason"]) == (False, "stale_pause")
    assert [e["by"] for e in events(store, "question_answered")] == ["timeout"]


def test_a_second_question_while_a_pause_is_open_waits(questions: QuestionStore, store: JobStore) -> None:
    assert ask(store, index=2) == "busy"  # released, no result: it goes again with the answer
    rec = store.machine.record(JOB)
    assert (rec["held"], rec["pause_seq"], rec["asking"]) == (",1,", "1", "2|,2,")
    assert store.redis.hget(store.key(JOB, "calls"), "2:holder") == b""
    assert questions.answer(JOB, {"city": "Oslo"})["accepted"] is True
    assert store.machine.outbox(JOB)[1] == [
        {"task": "tandem.run_tool", "args": [JOB, 2, 1]},
        {"task": "tandem.run_tool", "args": [JOB, 2, 2]},
    ]
    assert store.machine.record(JOB)["asking"] == ""
    assert ask(store, index=2) == "parked"  # now it asks: a pause of its own
    assert QuestionStore(store).get(JOB).pause_id == "job:2:tools:2"  # type: ignore[union-attr]


def test_the_task_refuses_another_tenants_job_and_bad_input(
    questions: QuestionStore, store: JobStore
) -> None:
    store.redis.hset(store.key(JOB, "state"), "owner", "team-a")
    foreign = answer_job(questions, JOB, {"city": "Oslo"}, PAUSE, None, "team-b")
    unknown = answer_job(questions, "job-b", {"city": "Oslo"}, PAUSE, None, "team-b")
    assert foreign == {**unknown, "job_id": JOB, "error": unknown["error"].replace("'job-b'", repr(JOB))}
    assert (foreign["reason"], foreign["pause_id"], foreign["current_pause"]) == ("unknown", PAUSE, None)
    assert answer_job(questions, 7, "x")["accepted"] is False
    assert questions.answer(JOB, "x", key="")["reason"] == "refused"
    assert answer_job(questions, JOB, {"city": "Oslo"}, PAUSE, None, "team-a")["accepted"] is True


def test_the_schema_is_kept_as_sent(store: JobStore) -> None:
    start_round(store)
    claim = store.machine.claim_call(JOB, 2, 1, LEASE, 5)
    assert isinstance(claim, Claim)
    schema = {"type": "object", "required": [], "properties": {"tags": {"type": "array", "default": []}}}
    question = Question(text="Tags?", answer_schema=schema, round=2, call_index=1)
    assert QuestionStore(store).park(claim, QuestionPending(question, "tag"), 60) == "parked"
    record = QuestionStore(store).get(JOB)
    assert record is not None and record.answer_schema == schema and record.seq == 1
    assert store.status(JOB).question["answer_schema"] == schema  # type: ignore[index,union-attr]
    assert QuestionStore(store).answer(JOB, {"tags": []})["accepted"] is True
