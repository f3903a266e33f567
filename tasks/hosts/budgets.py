"""Per-job budgets and priority: what ``JobSpec.max_tokens_total``, ``max_cost_usd`` and
``priority`` mean to the steps and the queues."""

from __future__ import annotations

from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import Usage, children_usage, total_usage
from tandem.tasks.spec import JobSpec


def budget_spent(spec: JobSpec, memory: ReasonerMemory) -> str | None:
    """Why the job may not call a model again (a budget is spent), or ``None``.

    Checked before every model call (a step whose reply is already stored goes on): a job stops
    at the first call that would start with a budget already used up. Its memory is kept; the
    job ends ``truncated`` with this reason. The usage counted is the job's own model calls' and
    what its ended child jobs spent (``tandem.tasks.control.spend``); the reason names the
    children's part when there is one.
    """
    if spec.max_tokens_total is None and spec.max_cost_usd is None:
        return None
    messages = memory.get_messages()
    usage, by_children = total_usage(messages), _by_children(children_usage(messages))
    if spec.max_tokens_total is not None and usage.total_tokens >= spec.max_tokens_total:
        return (
            f"the job's token budget is spent: {usage.total_tokens} tokens used of max_tokens_total="
            f"{spec.max_tokens_total!r} in {usage.calls} model calls{by_children}; "
            "raise max_tokens_total to go further"
        )
    if spec.max_cost_usd is not None and usage.cost_usd >= spec.max_cost_usd:
        return (
            f"the job's cost budget is spent: ${usage.cost_usd:.4f} used of max_cost_usd="
            f"{spec.max_cost_usd!r} in {usage.calls} model calls{by_children}; "
            "raise max_cost_usd to go further"
        )
    return None


def _by_children(spent: Usage) -> str:
    """The children's part of a spent budget's reason ("" when its child jobs spent nothing)."""
    if not spent.calls and not spent.total_tokens and not spent.cost_usd:
        return ""
    return (
        f" (of which {spent.total_tokens} tokens, ${spent.cost_usd:.4f} and {spent.calls} model calls "
        "by its child jobs)"
    )


def message_priority(priority: int, broker_url: str, *, boost: int = 0) -> int:
    """The broker message priority of a job of ``JobSpec.priority`` (9: most urgent), ``boost``
    levels more urgent (at most 9): a step sent again after a takeover goes ahead of its own
    priority's backlog, since it had already reached a worker once.

    RabbitMQ delivers higher numbers first (queues declared with ``x-max-priority``); Celery's
    Redis transport serves its priority steps from 0 up, so the scale is turned over there.
    """
    urgent = min(max(priority + boost, 0), 9)
    if broker_url.startswith(("amqp", "pyamqp")):
        return urgent
    return 9 - urgent
