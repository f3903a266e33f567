"""What child jobs spend is their parent's spend (docs/children.md).

- Each ended child's ``JobResult.usage`` (its own children's included) travels with its
  ``ChildOutcome`` (``outcome_of``), so the outcomes stored as a spawn's answer hold it.
- When a call whose run spawned has run (``WorkerSpawner.used``: a call that spawns nothing costs
  no read), the framework attaches the usage of every ended child in
  its stored answers to its ``FunctionCallResult`` (``with_children_spend``), whatever the tool
  returned; the round's ``tool`` message sums its calls' (``Plan.record_tools``), so the parent's
  ``total_usage`` (its budgets before every model call, its ``JobResult.usage``) includes them.
  The answers are stored once per spawn and the result and the message once per key: a call or
  a step run twice counts them once. A child still running when the parent resumed (``wait`` of
  ``any`` or ``n``) is not counted: only what had ended.
- A spawn divides what is left of the parent's budget (``budget_left``), not the whole of it.

The tenants' daily usage and the model metrics count each model reply where it is made (the
child's in the child's steps), never a ``JobResult.usage``: the children are counted once there.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tandem.reasoner.messages import FunctionCallResult, Usage, total_usage
from tandem.tasks.spec import JobResult, JobSpec
from tandem.toolkit.children import ChildOutcome

if TYPE_CHECKING:
    from tandem.tasks.runtime import Runtime

__all__ = [
    "MIN_COST_USD",
    "budget_left",
    "outcome_of",
    "outcome_usage",
    "spawned_spend",
    "with_children_spend",
]

MIN_COST_USD = 1e-9
"""The least cost budget a child gets (a spec's ``max_cost_usd`` must be over 0): a child of a
parent whose cost budget is spent stops before its second model call."""


def outcome_of(cid: str, result: JobResult) -> ChildOutcome:
    """The outcome of child ``cid`` that ended with ``result``, its usage with it."""
    return ChildOutcome(
        job_id=cid,
        status=result.status,
        deliverable=result.deliverable,
        error=result.error,
        usage=result.usage.model_dump(mode="json"),
    )


def outcome_usage(outcome: ChildOutcome) -> Usage:
    """What ``outcome``'s child spent: its usage once ended, nothing while it runs."""
    if not outcome.ended or not outcome.usage:
        return Usage()
    return Usage.model_validate(outcome.usage)


def spawned_spend(rt: Runtime, job_id: str, index: int | None = None) -> Usage:
    """What the ended children in the stored answers of the current round's spawns spent: those of
    call ``index``, or of every call of the round (``None``). Each spawn's answer is stored once
    (``{index}:children:{seq}`` of the round's ``calls`` hash), so each child counts once."""
    match = f"{index}:children:*" if index is not None else "*:children:*"
    spent = Usage()
    for _field, raw in rt.redis.hscan_iter(rt.store.key(job_id, "calls"), match=match):
        stored = json.loads(raw)
        answer = stored.get("answer") if isinstance(stored, dict) else None
        for outcome in answer or []:
            spent = spent + outcome_usage(ChildOutcome.model_validate(outcome))
    return spent


def with_children_spend(
    rt: Runtime, job_id: str, index: int, result: FunctionCallResult
) -> FunctionCallResult:
    """``result`` of call ``index`` with what the child jobs it started spent as its ``usage``."""
    spent = spawned_spend(rt, job_id, index)
    if spent == Usage():
        return result
    return result.model_copy(update={"usage": spent})


def budget_left(rt: Runtime, job_id: str, parent: JobSpec) -> JobSpec:
    """``parent`` with its budgets cut to what is left of them: less the job's usage so far (its
    memory's, the children of earlier rounds' included) and the spend of the children of this
    round's spawns that ended (not in its memory yet). At least 1 token and ``MIN_COST_USD`` are
    left, so a child's share is never ``None`` where the parent has a budget."""
    if parent.max_tokens_total is None and parent.max_cost_usd is None:
        return parent
    used = total_usage(rt.store.memory(job_id).get_messages()) + spawned_spend(rt, job_id)
    update: dict[str, int | float] = {}
    if parent.max_tokens_total is not None:
        update["max_tokens_total"] = max(parent.max_tokens_total - used.total_tokens, 1)
    if parent.max_cost_usd is not None:
        update["max_cost_usd"] = max(parent.max_cost_usd - used.cost_usd, MIN_COST_USD)
    return parent.model_copy(update=update)
