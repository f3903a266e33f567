"""One refusal for "not yours" and "does not exist", on every task called by name.

Each control task (decide, answer, message, resume, fork, follow-up), sent through Celery's own
call path (``Task.apply``: the argument checks, the scope, the task's code) on a runtime over
fakeredis, is asked for team-b's job and for an id no job has, by a request naming no tenant
(``default``) and one naming team-a. The two answers must be the same answer, word for word once
the ids are swapped, and that answer is ``owners.unknown_job``; nothing is written anywhere (every
key, value and TTL of the store is as it was), no message is sent, and no key is made for the
unknown id. Then team-b asks the same of its own job and is accepted: the refusal came from the
job's owner alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
from celery.exceptions import Ignore
from redis import Redis

from tandem.broker_config import Settings
from tandem.tasks import runtime as runtime_module
from tandem.tasks.app import app
from tandem.tasks.control import resume as resume_module
from tandem.tasks.control.owners import no_such_job, unknown_job
from tandem.tasks.runtime import Runtime
from tandem.tasks.signers import ForeignTenant
from tandem.tasks.task_args import CONTROL_TASKS
from tests.tasks.test_approvals import park
from tests.tasks.test_messages import dual
from tests.tasks.test_questions import ask, start_round
from tests.tasks.test_resume import one_round, stored_job

THEIRS = "job-of-team-b-01"
NOBODY = "no-such-job-0001"  # as long as THEIRS: the answers' lengths tell nothing either
Sent = list[tuple[str, Any]]


@pytest.fixture(autouse=True, scope="module")
def registered() -> None:
    """Every task of the app registered, as a worker has them (``app.conf.imports``)."""
    app.loader.import_default_modules()


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings(lease_seconds=2.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)  # the tasks' runtime, and submit's
    yield runtime


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Every message the tasks send (none reaches a broker)."""
    messages: Sent = []

    def send_task(name: str, args: Any = None, kwargs: Any = None, **options: Any) -> None:
        messages.append((name, args if args is not None else kwargs))

    monkeypatch.setattr(app, "send_task", send_task)
    monkeypatch.setattr(resume_module.app.backend, "forget", lambda job_id: None)
    return messages


def spec(owner: str) -> str:
    return json.dumps({"goal": "g", "owner": owner})


def awaiting_approval(rt: Runtime, job_id: str, owner: str) -> None:
    park(rt.store, job_id, spec=spec(owner), now=1e12)  # a deadline far away


def awaiting_answer(rt: Runtime, job_id: str, owner: str) -> None:
    start_round(rt.store, job_id, spec=spec(owner))
    assert ask(rt.store, job_id=job_id) == "parked"


def running(rt: Runtime, job_id: str, owner: str) -> None:
    dual(rt.store, job_id, owner=owner)


def ended(rt: Runtime, job_id: str, owner: str) -> None:
    stored_job(rt, "failed", one_round(), job_id=job_id, owner=owner)


Make = Callable[[Runtime, str, str], None]
CASES: list[tuple[str, Make, Callable[[str], dict[str, Any]]]] = [
    (
        "tandem.decide",
        awaiting_approval,
        lambda job: {"decisions": True, "pause_id": f"{job}:2:tools:1", "idempotency_key": "k-1"},
    ),
    (
        "tandem.answer",
        awaiting_answer,
        lambda job: {"answer": {"city": "Oslo"}, "pause_id": f"{job}:2:tools:1", "idempotency_key": "k-1"},
    ),
    ("tandem.message", running, lambda job: {"text": "Use the 2025 figures", "idempotency_key": "k-1"}),
    ("tandem.resume", ended, lambda job: {"max_rounds": 5}),
    ("tandem.fork", ended, lambda job: {"round": 1, "goal": "again"}),
    ("tandem.follow_up", ended, lambda job: {"goal": "and now for 2024", "idempotency_key": "k-1"}),
]


def test_the_table_names_every_task_called_by_name() -> None:
    assert {name for name, _, _ in CASES} == CONTROL_TASKS


def keyspace(redis: Redis) -> dict[bytes, tuple[Any, int]]:
    """Every key's value and its time to live (ms)."""
    read = {
        b"string": redis.get,
        b"hash": redis.hgetall,
        b"list": lambda k: redis.lrange(k, 0, -1),
        b"set": redis.smembers,
        b"zset": lambda k: redis.zrange(k, 0, -1, withscores=True),
        b"stream": redis.xrange,
    }
    return {key: (read[redis.type(key)](key), redis.pttl(key)) for key in redis.scan_iter()}


def unchanged(before: dict[bytes, tuple[Any, int]], after: dict[bytes, tuple[Any, int]]) -> None:
    """The same keys with the same values; no TTL set again (each only ran down)."""
    assert after.keys() == before.keys(), set(after) ^ set(before)
    for key, (value, ttl) in after.items():
        assert value == before[key][0], key
        assert 0 < ttl <= before[key][1], (key, ttl, before[key][1])


def call(name: str, **kwargs: Any) -> dict[str, Any]:
    """``name`` as a worker runs a message's call (``Task.apply``: arguments checked, scope entered)."""
    reply = app.tasks[name].apply(kwargs=kwargs).get()
    assert isinstance(reply, dict), reply
    return reply


def swapped(reply: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return dict(json.loads(json.dumps(reply).replace(old, new)))


@pytest.mark.parametrize("asker", [{}, {"owner": "team-a"}], ids=["naming-no-tenant", "naming-team-a"])
@pytest.mark.parametrize(("name", "make", "asked"), CASES, ids=[c[0] for c in CASES])
def test_another_tenants_job_and_no_job_get_one_refusal_and_nothing_changes(
    rt: Runtime,
    sent: Sent,
    name: str,
    make: Make,
    asked: Callable[[str], dict[str, Any]],
    asker: dict[str, str],
) -> None:
    make(rt, THEIRS, "team-b")
    before = keyspace(rt.redis)

    foreign = call(name, job_id=THEIRS, **asked(THEIRS), **asker)
    unchanged(before, keyspace(rt.redis))
    missing = call(name, job_id=NOBODY, **asked(NOBODY), **asker)
    unchanged(before, keyspace(rt.redis))  # no key of the unknown id either
    assert sent == []

    assert foreign == swapped(missing, NOBODY, THEIRS)
    pause = asked(THEIRS).get("pause_id")
    assert foreign == unknown_job(name, THEIRS, pause)
    assert (foreign["accepted"], foreign["reason"], foreign["error"]) == (
        False,
        "unknown",
        no_such_job(THEIRS),
    )

    # The same request from the job's own tenant is taken: the refusal was the owner's alone.
    own = call(name, job_id=THEIRS, **asked(THEIRS), owner="team-b")
    assert own["accepted"] is True, own


def test_a_foreign_tenants_signed_control_message_gets_the_same_refusal(rt: Runtime) -> None:
    """A message signed by team-a's certificate that asks as team-b (``tandem.tasks.signers``)
    gets the answer of an unknown job; an intake or a step is refused without one."""
    ended(rt, THEIRS, "team-b")
    for name, _, asked in CASES:
        task = app.tasks[name]
        named = {"job_id": THEIRS, **asked(THEIRS), "owner": "team-b"}
        foreign = ForeignTenant(
            f"{name}: signed with a certificate of tenant 'team-a', but asks as owner 'team-b'"
        )
        assert task._foreign(name, foreign, named, named, ()) == unknown_job(
            name, THEIRS, named.get("pause_id")
        )
        assert task._foreign(name, foreign, named, named, ()) == call(name, **{**named, "owner": "team-a"})
    for name in ("tandem.infer", "tandem.collect_tools"):
        with pytest.raises(Ignore):
            app.tasks[name]._foreign(name, ForeignTenant("no"), {}, {}, ())
