"""A child's spend is its parent's (``tandem.tasks.control.spend``), over fakeredis: an ended
child's usage travels with its outcome, the spawning call's result and the round's tool message
carry it, the parent's budgets and final usage count it (once, however often a step runs), a
later spawn divides what is left of the budget, and the tenant's day counts each model call once.

The parent is ``test_children``'s: a mono job in round 2 whose call 1 spawns (9000 tokens, $0.30).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, Usage, total_usage
from tandem.tasks.control.children import ChildrenPending, ChildrenStore, WorkerSpawner, on_job_ended
from tandem.tasks.control.spend import spawned_spend, with_children_spend
from tandem.tasks.hosts.budgets import budget_spent
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobResult, JobSpec
from tandem.tasks.steps.guard import finish
from tandem.tasks.tenants.usage import TenantUsage
from tandem.toolkit.children import ChildOutcome
from tandem.toolkit.context import ToolCallContext
from tests.tasks import test_children
from tests.tasks.test_children import PARENT, PARENT_SPEC, spawn, start_round

rt = test_children.rt
sent = test_children.sent

Sent = list[tuple[str, dict[str, Any]]]


def actor_reply(tokens: int, cost: float) -> str:
    usage = Usage(total_tokens=tokens, prompt_tokens=tokens, calls=1, cost_usd=cost)
    return ModelMessage(role="actor", round=2, content="fan out", usage=usage).model_dump_json()


def end_spending(rt: Runtime, cid: str, tokens: int, cost: float = 0.0, calls: int = 1) -> None:
    """End child ``cid`` completed, having spent ``tokens`` and ``cost`` in ``calls`` model calls."""
    spec = rt.store.spec(cid) or JobSpec.model_validate(json.loads(rt.machine.intake(cid) or "{}"))
    usage = Usage(total_tokens=tokens, completion_tokens=tokens, calls=calls, cost_usd=cost)
    result = rt.store.finish(JobResult(job_id=cid, status="completed", deliverable="done", usage=usage))
    on_job_ended(rt, cid, spec, result)


def parked_and_ended(
    rt: Runtime, spends: list[int], wait: Any = "all", reply: str = test_children.ACTOR_REPLY, calls: int = 1
) -> list[str]:
    """Call 1 spawned ``len(spends)`` children, parked, and those with a spend ended with it
    (tokens; $0.01 per 1000, in ``calls`` model calls); the children's ids."""
    claim = start_round(rt, reply=reply)
    pending = spawn(rt, n=len(spends), wait=wait)
    assert isinstance(pending, ChildrenPending)
    assert ChildrenStore(rt.store).park(claim, pending, 600) == "parked"
    for cid, tokens in zip(pending.children, spends, strict=True):
        if tokens:
            end_spending(rt, cid, tokens, tokens / 100_000, calls)
    return pending.children


def call_result(output: str = "the tool's own words") -> FunctionCallResult:
    return FunctionCallResult(index=1, name="fan_out", status=FunctionCallStatus.SUCCEEDED, output=output)


def test_the_childrens_usage_reaches_the_calls_result_and_the_rounds_tool_message(
    rt: Runtime, sent: Sent
) -> None:
    parked_and_ended(rt, [3000, 2000])
    outcomes = spawn(rt, n=2)  # the call run again: its spawn returns the outcomes, usage with them
    assert isinstance(outcomes, list)
    assert [(o.usage or {}).get("total_tokens") for o in outcomes] == [3000, 2000]
    # Whatever the tool returned, the framework attaches what its children spent.
    result = with_children_spend(rt, PARENT, 1, call_result())
    assert (result.usage.total_tokens, result.usage.calls) == (5000, 2)
    assert result.usage.cost_usd == pytest.approx(0.05) and result.output == "the tool's own words"
    memory = rt.store.memory(PARENT)
    stored = rt.plan(PARENT_SPEC).record_tools(
        memory, 2, [result, call_result().model_copy(update={"index": 2})]
    )
    assert stored.usage.total_tokens == 5000
    assert total_usage(memory.get_messages()).total_tokens == 5000
    # The other call of the round started no child: nothing attached to it.
    assert with_children_spend(rt, PARENT, 2, call_result()).usage == Usage()


def test_the_parent_stops_at_its_next_model_call_once_its_and_its_childrens_spend_reach_the_budget(
    rt: Runtime, sent: Sent
) -> None:
    parked_and_ended(rt, [2500, 2500], reply=actor_reply(4000, 0.04), calls=3)
    result = with_children_spend(rt, PARENT, 1, call_result())
    memory = rt.store.memory(PARENT)
    assert budget_spent(PARENT_SPEC, memory) is None  # 4000 of 9000 before the round's results
    rt.plan(PARENT_SPEC).record_tools(memory, 2, [result])
    reason = budget_spent(PARENT_SPEC, memory)
    assert reason is not None
    assert "9000 tokens used of max_tokens_total=9000 in 7 model calls" in reason
    assert "(of which 5000 tokens, $0.0500 and 6 model calls by its child jobs)" in reason
    # The final usage includes the children's.
    outcome = rt.plan(PARENT_SPEC).outcome(memory, "truncated", reason)
    assert (outcome.usage.total_tokens, outcome.usage.calls) == (9000, 7)
    assert outcome.usage.cost_usd == pytest.approx(0.09)


def test_a_later_spawn_divides_what_is_left_of_the_budget(rt: Runtime, sent: Sent) -> None:
    claim = start_round(rt, reply=actor_reply(1000, 0.03))
    ctx = ToolCallContext(job_id=PARENT, round=2, call_index=1).bind_spawner(
        WorkerSpawner(rt, PARENT, 2, 1, "fan_out")
    )
    with pytest.raises(ChildrenPending) as first:
        ctx.spawn(["a", "b"])
    shares = [(s["max_tokens_total"], s["max_cost_usd"]) for _, s in sent]
    assert shares == [(4000, pytest.approx(0.135))] * 2  # (9000 - 1000) // 2, ($0.30 - $0.03) / 2
    assert ChildrenStore(rt.store).park(claim, first.value, 600) == "parked"
    end_spending(rt, first.value.children[0], 2000, 0.05)
    end_spending(rt, first.value.children[1], 1000, 0.05)
    # The call runs again: its first spawn returns, its second divides what is left among 3.
    again = ToolCallContext(job_id=PARENT, round=2, call_index=1).bind_spawner(
        WorkerSpawner(rt, PARENT, 2, 1, "fan_out")
    )
    assert [o.status for o in again.spawn(["a", "b"])] == ["completed", "completed"]
    with pytest.raises(ChildrenPending):
        again.spawn(["c", "d", "e"])
    later = [(s["max_tokens_total"], s["max_cost_usd"]) for _, s in sent[2:]]
    assert later == [(1666, pytest.approx(0.17 / 3))] * 3  # 9000 - 1000 - 3000 = 5000; $0.17 left


def test_a_spent_budget_still_gives_each_child_at_least_a_token(rt: Runtime, sent: Sent) -> None:
    start_round(rt, reply=actor_reply(9500, 0.5))
    assert isinstance(spawn(rt, n=2), ChildrenPending)
    assert [(s["max_tokens_total"], s["max_cost_usd"] > 0) for _, s in sent] == [(1, True)] * 2
    no_budget = PARENT_SPEC.model_copy(update={"max_tokens_total": None, "max_cost_usd": None})
    start_round(rt, job_id="parent-2", spec=no_budget, reply=actor_reply(9500, 0.5))
    assert isinstance(spawn(rt, n=2, job_id="parent-2"), ChildrenPending)
    assert [(s["max_tokens_total"], s["max_cost_usd"]) for _, s in sent[2:]] == [(None, None)] * 2


def test_a_spawn_step_run_twice_counts_once_and_a_running_child_not_at_all(rt: Runtime, sent: Sent) -> None:
    children = parked_and_ended(rt, [3000, 0], wait="any")  # the second still runs at the resume
    for _ in range(2):  # the resumed call run twice (a lost worker): the same outcomes
        outcomes = spawn(rt, n=2, wait="any")
        assert isinstance(outcomes, list) and [o.usage is None for o in outcomes] == [False, True]
    assert spawned_spend(rt, PARENT, 1).total_tokens == 3000
    end_spending(rt, children[1], 7000)  # it ends after the parent resumed: not counted here
    results = [with_children_spend(rt, PARENT, 1, call_result(f"run {n}")) for n in (1, 2)]
    assert [r.usage.total_tokens for r in results] == [3000, 3000]
    memory = rt.store.memory(PARENT)
    plan = rt.plan(PARENT_SPEC)
    for result in results:  # the collect step run twice: the first tool message is kept
        plan.record_tools(memory, 2, [result])
    assert total_usage(memory.get_messages()).total_tokens == 3000


def test_the_tenants_day_counts_each_model_call_once(rt: Runtime, sent: Sent) -> None:
    """Model calls count towards the tenant where they are made (``gate.count`` in the model step,
    the children's in their own steps); the parent's usage, children's included, is never added."""
    tenant = TenantUsage(rt.redis, rt.settings.prefix)
    tenant.add("team-a", 1000, 0.01)  # the parent's reply, counted by its model step
    for _ in range(2):
        tenant.add("team-a", 2000, 0.02)  # each child's replies, counted by its own model steps
    parked_and_ended(rt, [2000, 2000], reply=actor_reply(1000, 0.01))
    result = with_children_spend(rt, PARENT, 1, call_result())
    memory = rt.store.memory(PARENT)
    rt.plan(PARENT_SPEC).record_tools(memory, 2, [result])
    ended = finish(PARENT, "completed")
    assert ended["usage"]["total_tokens"] == 5000  # its own 1000 and its children's 4000
    tokens, cost = tenant.today("team-a")
    assert (tokens, cost) == (5000, pytest.approx(0.05))  # the same calls, each counted once


def test_the_model_reads_the_outcomes_without_their_usage() -> None:
    from tandem.reasoner.spawning import spawn_jobs

    given = [ChildOutcome(job_id="c1", status="completed", deliverable="x", usage={"total_tokens": 5})]
    assert given[0].usage == {"total_tokens": 5}  # an outcome carries its child's spend

    def spawner(specs: Any, wait: Any, seq: int) -> list[ChildOutcome]:
        return given

    shown = json.loads(spawn_jobs([{"goal": "a"}], context=ToolCallContext(job_id="j").bind_spawner(spawner)))
    assert shown == [{"job_id": "c1", "status": "completed", "deliverable": "x", "error": None}]
