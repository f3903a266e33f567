"""Breaking tests, from the docs alone, for a fork's tenant admission (docs/tenants.md, "Other ways
in") and a spawn's shared budget and children's spend (docs/children.md, "The budget is shared",
"A child's spend is its parent's"), on real workers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tandem.client.events import ChildEnded, Waiting
from tests.integration.conftest import EVENT_SECONDS, RESULT_SECONDS, Cluster, _make_cluster
from tests.integration.plan_model import goal_with_plan
from tests.integration.test_children import CHILD
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.integration

Hosts = tuple[Cluster, OpenAIServer, OpenAIServer]
TENANTS = {"default": {"max_running_jobs": 8}, "solo": {"max_running_jobs": 1}}
BUDGET = 100_000


@pytest.fixture(scope="module")
def cluster(redis_base: str) -> Iterator[Hosts]:
    clusters = _make_cluster(
        redis_base,
        TANDEM_TOOLKIT="tests.integration.children_tools:toolkit",
        TANDEM_TENANTS=json.dumps(TENANTS),
    )
    hosts = next(clusters)
    hosts[0].start("thinker", "actor", "tools", concurrency={"tools": 4})
    yield hosts
    next(clusters, None)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENT_SECONDS
    while not check() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert check(), f"timed out waiting for {what}"


def test_a_fork_waits_for_its_tenants_slot_with_a_fork_waiting_event(cluster: Hosts) -> None:
    """docs/tenants.md: a fork is admitted like a submitted job: held (``waiting``, ``wait_for:
    tenant``, no queued message, a ``waiting`` event with reason tenant and step fork) until a slot
    frees; then it runs."""
    c, _, _ = cluster
    ended = c.submit(goal="NEVER_DONE keep reading", reasoner="mono", max_rounds=1, owner="solo")
    assert ended.result(timeout=RESULT_SECONDS).status == "truncated"
    blocker = c.submit(goal="NEVER_DONE keep reading", reasoner="mono", max_rounds=400, owner="solo")
    _until(lambda: blocker.status().state == "running", "the blocker to run")
    try:
        fork = ended.fork(1, max_rounds=3)
        assert fork.id != ended.id
        _until(lambda: fork.status().state == "waiting", "the fork to wait")
        status = fork.status()
        assert status.waiting is not None and status.waiting.reason == "tenant", status
        queued = [m for q in ("thinker", "actor", "tools", "celery") for m in c.redis.lrange(q, 0, -1)]
        assert not any(fork.id.encode() in m for m in queued)  # held: no message
        _until(lambda: any(isinstance(e, Waiting) for e in c.store.read_events(fork.id)), "the waiting event")
        waits = [e for e in c.store.read_events(fork.id) if isinstance(e, Waiting)]
        assert [(e.reason, e.step) for e in waits] == [("tenant", "fork")], waits
        time.sleep(1.0)
        assert fork.status().state == "waiting"  # still, while the blocker holds the only slot
        assert ended.status().state != "waiting"  # the forked job itself is untouched
    finally:
        blocker.cancel()
    assert blocker.result(timeout=RESULT_SECONDS).status == "cancelled"
    result = fork.result(timeout=RESULT_SECONDS)
    assert result.status == "truncated" and result.rounds == 3, result
    assert c.redis.hget(c.store.key(fork.id, "state"), "admitted_at")


def test_children_share_what_is_left_of_the_budget_and_their_spend_is_the_parents(cluster: Hosts) -> None:
    """docs/children.md: each of ``n`` children gets ``(max_tokens_total - used so far) // n``
    (no cost budget when the parent has none), and the parent's final usage is its own model
    calls' plus its ended children's."""
    c, _, _ = cluster
    plan = [[{"name": "fan_out", "args": {"goals": [CHILD, CHILD]}}]]
    handle = c.submit(
        goal=goal_with_plan("fan out", plan), reasoner="mono", max_rounds=4, max_tokens_total=BUDGET
    )
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    assert len(result.children) == 2
    messages = c.store.memory(handle.id).get_messages()
    first_tool = next(i for i, m in enumerate(messages) if m.role == "tool")
    so_far = sum(m.usage.total_tokens for m in messages[:first_tool])  # the parent's usage at its spawn
    assert so_far > 0
    ended = []
    for child in result.children:
        spec = c.store.spec(child)
        assert spec is not None and spec.parent_id == handle.id
        assert spec.max_tokens_total == (BUDGET - so_far) // 2, (spec.max_tokens_total, so_far)
        assert spec.max_tokens_total <= BUDGET // 2
        assert spec.max_cost_usd is None  # none when the parent has none
        outcome = c.store.result(child)
        assert outcome is not None and outcome.status == "completed", outcome
        assert 0 < outcome.usage.total_tokens <= spec.max_tokens_total
        ended.append(outcome)
    own = sum(m.usage.total_tokens for m in messages if m.role != "tool")
    by_children = sum(r.usage.total_tokens for r in ended)
    assert result.usage.total_tokens == own + by_children, (result.usage, own, by_children)
    ends = [e for e in c.store.read_events(handle.id) if isinstance(e, ChildEnded)]
    assert sorted(e.child_id for e in ends) == sorted(result.children)


def test_a_child_of_a_parent_without_budget_has_none(cluster: Hosts) -> None:
    """docs/children.md: the children's budgets are "none when the parent has none"."""
    c, _, _ = cluster
    plan = [[{"name": "fan_out", "args": {"goals": [CHILD, CHILD]}}]]
    handle = c.submit(goal=goal_with_plan("fan out", plan), reasoner="mono", max_rounds=4)
    result = handle.result(timeout=RESULT_SECONDS)
    assert result.status == "completed", result
    for child in result.children:
        spec = c.store.spec(child)
        assert spec is not None and spec.max_tokens_total is None and spec.max_cost_usd is None, spec
