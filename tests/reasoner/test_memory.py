"""``ReasonerMemory``: the in-process and the Redis implementations behave the same.

Every behaviour test runs against both (the Redis one on fakeredis); the TTL test is Redis only,
since process memory has nothing to expire.
"""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest

from tandem.reasoner.loop.rounds import DualPlan
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.memory import InMemoryReasonerMemory, ReasonerMemory, RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, Role, Usage
from tandem.reasoner.task import Task
from tandem.reasoner.testing import ScriptedModelService


def msg(round_no: int, role: Role, content: str = "") -> ModelMessage:
    return ModelMessage(role=role, round=round_no, content=content or f"{role} of round {round_no}")


@pytest.fixture(params=["in-memory", "redis"])
def memory(request: pytest.FixtureRequest) -> Iterator[ReasonerMemory]:
    if request.param == "in-memory":
        yield InMemoryReasonerMemory()
    else:
        yield RedisReasonerMemory(fakeredis.FakeRedis(), "job-1")


def test_both_implementations_satisfy_the_protocol(memory: ReasonerMemory) -> None:
    assert isinstance(memory, ReasonerMemory)


def test_the_first_write_of_a_key_wins(memory: ReasonerMemory) -> None:
    assert memory.add_message(msg(0, "thinker", "first")) is True
    assert memory.add_message(msg(0, "thinker", "second")) is False

    stored = memory.get_message(0, "thinker")
    assert stored is not None and stored.content == "first"
    assert [m.content for m in memory.get_messages()] == ["first"]


def test_a_message_round_trips_with_every_field(memory: ReasonerMemory) -> None:
    result = FunctionCallResult(
        index=1, name="add", args={"a": 1}, status=FunctionCallStatus.FAILED, output="boom"
    )
    original = ModelMessage(
        role="tool",
        round=3,
        content="<function_call_result>…</function_call_result>",
        reasoning="hidden thoughts",
        function_results=[result],
        usage=Usage(prompt_tokens=5, completion_tokens=7, total_tokens=12, calls=1),
        model="m",
    )
    memory.add_message(original)
    assert memory.get_message(3, "tool") == original
    assert memory.get_message(3, "actor") is None
    assert memory.get_message(4, "tool") is None


def test_messages_come_back_in_round_then_role_order(memory: ReasonerMemory) -> None:
    # Written out of order, and with round 10 to catch a string sort of the rounds.
    for round_no, role in [
        (10, "actor"),
        (1, "tool"),
        (0, "actor"),
        (1, "thinker"),
        (0, "tool"),
        (2, "thinker"),
        (0, "thinker"),
        (1, "actor"),
    ]:
        memory.add_message(msg(round_no, role))  # type: ignore[arg-type]

    assert [(m.round, m.role) for m in memory.get_messages()] == [
        (0, "thinker"),
        (0, "actor"),
        (0, "tool"),
        (1, "thinker"),
        (1, "actor"),
        (1, "tool"),
        (2, "thinker"),
        (10, "actor"),
    ]


def test_clear_forgets_everything(memory: ReasonerMemory) -> None:
    memory.add_message(msg(0, "thinker"))
    memory.add_message(msg(0, "actor"))
    memory.clear()

    assert memory.get_messages() == []
    assert memory.get_message(0, "thinker") is None
    # Cleared keys can be written again.
    assert memory.add_message(msg(0, "thinker", "again")) is True


def test_a_step_run_twice_stores_one_message_and_calls_the_model_once(memory: ReasonerMemory) -> None:
    thinker = ScriptedModelService(["<instruction>count</instruction>", "never used"], name="t")
    actor = ScriptedModelService(["<action>counted</action>", "never used"], name="a")
    task = Task(goal="count")

    plan, inputs = DualPlan(), StepInputs(task, memory)
    first = plan.run_model(Step(0, "thinker"), thinker, inputs)
    again = plan.run_model(Step(0, "thinker"), thinker, inputs)
    acted = plan.run_model(Step(0, "actor"), actor, inputs)
    acted_again = plan.run_model(Step(0, "actor"), actor, inputs)

    assert first == again and acted == acted_again
    assert (len(thinker.calls), len(actor.calls)) == (1, 1)
    assert [(m.round, m.role, m.content) for m in memory.get_messages()] == [
        (0, "thinker", "<instruction>count</instruction>"),
        (0, "actor", "<action>counted</action>"),
    ]


def test_expire_is_accepted_by_both(memory: ReasonerMemory) -> None:
    memory.add_message(msg(0, "actor"))
    memory.expire(60)
    assert [m.role for m in memory.get_messages()] == ["actor"]


def test_in_memory_constructor_deduplicates() -> None:
    memory = InMemoryReasonerMemory([msg(0, "actor", "kept"), msg(0, "actor", "dropped"), msg(0, "thinker")])
    assert [(m.role, m.content) for m in memory.get_messages()] == [
        ("thinker", "thinker of round 0"),
        ("actor", "kept"),
    ]


# -- Redis only -------------------------------------------------------------------------------


def test_redis_memory_has_no_ttl_until_expire_sets_one() -> None:
    redis = fakeredis.FakeRedis()
    memory = RedisReasonerMemory(redis, "job-9", prefix="pfx")
    memory.add_message(msg(0, "actor"))
    assert memory.key == "pfx:{job-9}:memory"
    assert redis.ttl(memory.key) == -1  # exists, no TTL while the job runs

    memory.expire(120)

    assert 0 < redis.ttl(memory.key) <= 120


def test_redis_memories_of_two_jobs_are_apart() -> None:
    redis = fakeredis.FakeRedis()
    one, two = RedisReasonerMemory(redis, "one"), RedisReasonerMemory(redis, "two")
    one.add_message(msg(0, "actor", "for one"))
    two.add_message(msg(0, "actor", "for two"))
    one.clear()

    assert one.get_messages() == []
    assert [m.content for m in two.get_messages()] == ["for two"]


def test_two_redis_clients_see_one_memory() -> None:
    """What the Celery steps rely on: a message written by one worker is read by the next."""
    server = fakeredis.FakeServer()
    writer = RedisReasonerMemory(fakeredis.FakeRedis(server=server), "job")
    reader = RedisReasonerMemory(fakeredis.FakeRedis(server=server), "job")
    writer.add_message(msg(0, "thinker", "plan"))

    assert reader.add_message(msg(0, "thinker", "duplicate")) is False
    assert [m.content for m in reader.get_messages()] == ["plan"]
