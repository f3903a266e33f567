"""Per-job budgets (tokens, cost) and the broker priority of a job."""

from __future__ import annotations

import fakeredis
import pytest

from tandem.reasoner.memory import RedisReasonerMemory
from tandem.reasoner.messages import ModelMessage, Usage
from tandem.tasks.errors import JobSpecError
from tandem.tasks.hosts.budgets import budget_spent, message_priority
from tandem.tasks.spec import JobSpec, validate_spec


def memory_with(*usages: Usage) -> RedisReasonerMemory:
    memory = RedisReasonerMemory(fakeredis.FakeRedis(), "job-1", prefix="t")
    for i, usage in enumerate(usages):
        memory.add_message(ModelMessage(role="actor", round=i, content="...", usage=usage))
    return memory


def test_no_budget_never_stops_a_job() -> None:
    assert budget_spent(JobSpec(goal="g"), memory_with(Usage(total_tokens=10**9, cost_usd=10**6))) is None


def test_the_token_budget() -> None:
    spec = JobSpec(goal="g", max_tokens_total=1000)
    assert budget_spent(spec, memory_with(Usage(total_tokens=600, calls=1))) is None
    reason = budget_spent(
        spec, memory_with(Usage(total_tokens=600, calls=1), Usage(total_tokens=450, calls=1))
    )
    assert reason is not None
    assert "1050 tokens used of max_tokens_total=1000 in 2 model calls" in reason
    assert "raise max_tokens_total" in reason


def test_the_cost_budget() -> None:
    spec = JobSpec(goal="g", max_cost_usd=0.05)
    assert budget_spent(spec, memory_with(Usage(cost_usd=0.02, calls=1))) is None
    reason = budget_spent(spec, memory_with(Usage(cost_usd=0.02, calls=1), Usage(cost_usd=0.04, calls=1)))
    assert reason is not None and "$0.0600 used of max_cost_usd=0.05" in reason


@pytest.mark.parametrize(
    ("field", "value"),
    [("priority", 10), ("priority", -1), ("max_tokens_total", 0), ("max_cost_usd", 0)],
)
def test_bad_budget_and_priority_values_are_refused(field: str, value: object) -> None:
    with pytest.raises(JobSpecError, match=f"field {field!r}"):
        validate_spec({"goal": "g", field: value})


def test_message_priority_follows_each_transport() -> None:
    assert message_priority(9, "redis://h:6379/0") == 0  # Redis serves level 0 first
    assert message_priority(0, "redis://h:6379/0") == 9
    assert message_priority(9, "amqp://guest@h//") == 9  # RabbitMQ serves the highest first


def test_a_boost_is_one_level_more_urgent_on_each_transport_and_capped() -> None:
    assert message_priority(5, "redis://h:6379/0", boost=1) == 3
    assert message_priority(5, "amqp://guest@h//", boost=1) == 6
    assert message_priority(9, "redis://h:6379/0", boost=1) == 0
    assert message_priority(9, "amqp://guest@h//", boost=1) == 9
