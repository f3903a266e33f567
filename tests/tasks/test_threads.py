"""Threads over fakeredis: a job joins its thread's index once and in order, the index has a TTL,
each tenant sees only its own jobs in a thread, and what a follow-up reads keeps within its bound,
dropping the oldest entries first and saying how many."""

from __future__ import annotations

import fakeredis
import pytest

from tandem.reasoner.messages import ModelMessage
from tandem.tasks.control.threads import ThreadJob, index_job, thread_jobs, thread_text
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.state.keys import thread_key
from tandem.tasks.state.store import JobStore


@pytest.fixture
def store() -> JobStore:
    return JobStore(fakeredis.FakeRedis())


def ended(store: JobStore, job_id: str, goal: str, answer: str, owner: str = "default") -> None:
    store.create(job_id, JobSpec(goal=goal, owner=owner))
    store.mark_queued(job_id, owner=owner)
    store.finish(JobResult(job_id=job_id, status="completed", deliverable=answer, owner=owner), ttl=600)


def test_a_job_joins_its_thread_once_in_its_place_with_a_ttl(store: JobStore) -> None:
    ended(store, "a", "first", "one")
    ended(store, "b", "second", "two")
    assert index_job(store, "a", "a", 100, at=10.0) == 1
    assert index_job(store, "a", "b", 300, at=20.0) == 2
    assert index_job(store, "a", "a", 50, at=30.0) == 2  # already there: keeps its place
    assert [j.job_id for j in thread_jobs(store, "a")] == ["a", "b"]
    assert 200 < store.redis.ttl(thread_key(store.prefix, "a")) <= 300  # the longest asked for
    assert thread_key(store.prefix, "a") == "tandem:{a}:thread"


def test_each_tenant_sees_only_its_own_jobs_in_a_thread(store: JobStore) -> None:
    ended(store, "a", "first", "one", owner="team-a")
    ended(store, "x", "intruder", "?", owner="team-b")
    index_job(store, "a", "a", 100, at=1.0)
    index_job(store, "a", "x", 100, at=2.0)  # team-b named team-a's thread id
    assert [j.job_id for j in thread_jobs(store, "a", "team-a")] == ["a"]
    assert [j.job_id for j in thread_jobs(store, "a", "team-b")] == ["x"]
    assert [j.job_id for j in thread_jobs(store, "a")] == ["a", "x"]  # admin
    [job] = thread_jobs(store, "a", "team-a")
    assert (job.goal, job.state, job.deliverable, job.owner) == ("first", "completed", "one", "team-a")


def test_the_thread_text_holds_goals_messages_and_answers_in_order(store: JobStore) -> None:
    ended(store, "a", "first goal", "first answer")
    store.memory("a").add_message(
        ModelMessage(role="person", round=1, content="in euros please", message_id="a:message:0001")
    )
    jobs = [ThreadJob(job_id="a", goal="first goal", state="completed", deliverable="first answer")]
    jobs.append(ThreadJob(job_id="b", goal="second goal", state="failed"))
    jobs.append(ThreadJob(job_id="c", goal="third goal", state="running"))
    text, dropped = thread_text(store, jobs, 10_000)
    assert dropped == 0
    assert text.splitlines() == [
        '<earlier_job n="1" status="completed">',
        "<goal>first goal</goal>",
        "<message from the person>in euros please</message from the person>",
        "<answer>first answer</answer>",
        "</earlier_job>",
        '<earlier_job n="2" status="failed">',
        "<goal>second goal</goal>",
        "<answer>(none: the job ended failed)</answer>",
        "</earlier_job>",
        '<earlier_job n="3" status="running">',
        "<goal>third goal</goal>",
        "<answer>(none yet: the job is running)</answer>",
        "</earlier_job>",
    ]


def test_over_its_bound_the_oldest_entries_are_dropped_and_counted(store: JobStore) -> None:
    jobs = [
        ThreadJob(job_id=f"j{n}", goal=f"goal {n} " + "x" * 80, state="completed", deliverable=f"answer {n}")
        for n in range(5)
    ]
    text, dropped = thread_text(store, jobs, 400)
    assert len(text) <= 400
    assert dropped == 7  # goals and answers of jobs 0..2, and job 3's goal (the note takes room too)
    assert text.startswith("[7 earlier message(s) of this thread dropped to keep it within 400 characters")
    assert "goal 3" not in text and "<answer>answer 3</answer>" in text and "<goal>goal 4" in text
    assert thread_text(store, jobs, 10_000) == (thread_text(store, jobs, 10_000)[0], 0)
