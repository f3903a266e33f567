"""ReAct's step budget: which replies' calls may run, and the answer of a run that ran out.

The step budget (``ReActReasoner(max_steps=...)``; ``JobSpec.max_rounds`` for a ``react`` job)
counts every model step and every tool step as one step, so with a budget ``B`` the model step of
round ``r`` is step ``2r + 1`` and leaves ``B - 2r - 1`` steps (``steps_left``). A reply's calls run
only if the steps left can hold the tool step *and* a model step to read the results (at least 2),
or just the tool step (at least 1) when every call goes to a ``return_direct`` tool. Otherwise the
reply is stored as the "needs more steps" answer (``NEEDS_MORE_STEPS``, naming the tools it wanted,
without its calls) and the run ends ``truncated``. So no run ever ends with a tool call that has no
result, and every model call sees a result for every call made before it, whatever the budget, even
or odd: budgets 1 and 2 allow one model call, 3 and 4 allow two, ``B`` allows ``(B + 1) // 2``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.messages import ModelMessage
from tandem.toolkit.tool import Tool

__all__ = [
    "NEEDS_MORE_STEPS",
    "budget_error",
    "needs_more_steps",
    "rounds_for",
    "steps_left",
    "tools_fit",
    "truncated_reply",
]

NEEDS_MORE_STEPS = "Sorry, I need more steps to finish this request."
"""The first sentence of the answer of a run whose step budget ran out while tools were wanted."""


def steps_left(budget: int, round_no: int) -> int:
    """Steps left in ``budget`` after the model step of ``round_no`` (``budget - 2*round_no - 1``)."""
    return budget - 2 * round_no - 1


def rounds_for(budget: int) -> int:
    """How many model steps (rounds) a step budget allows: ``(budget + 1) // 2``."""
    return (budget + 1) // 2


def tools_fit(budget: int, round_no: int, calls: Sequence[ParsedFunctionCall], tools: Sequence[Tool]) -> bool:
    """Whether the calls of round ``round_no``'s reply may run within ``budget``.

    They need a tool step and a model step to read the results (2 steps left), or only the tool
    step (1 step left) when every call is a readable call of a ``return_direct`` tool.
    """
    left = steps_left(budget, round_no)
    if left >= 2:
        return True
    direct = {t.name for t in tools if t.return_direct}
    return left >= 1 and bool(calls) and all(c.error is None and c.name in direct for c in calls)


def budget_error(budget: int) -> str:
    """``ReasonerOutcome.error`` / ``JobResult.error`` of a run truncated by its step budget."""
    return (
        f"the step budget ({budget} steps) ran out while the model still asked for tools; "
        "raise max_steps (max_rounds for a job) to let it go on"
    )


def needs_more_steps(message: ModelMessage) -> bool:
    """True for the reply stored when the budget could not hold its tool calls."""
    return message.role == "actor" and not message.tool_calls and message.content.startswith(NEEDS_MORE_STEPS)


def truncated_reply(reply: ModelMessage, calls: Sequence[ParsedFunctionCall], budget: int) -> ModelMessage:
    """``reply`` as the "needs more steps" answer: its calls dropped, the tools it wanted named."""
    names = ", ".join(dict.fromkeys(c.name or "(unnamed)" for c in calls))
    content = (
        f"{NEEDS_MORE_STEPS} The step budget of {budget} steps ran out while I still wanted to call "
        f"tools ({names}), so they were not run."
    )
    # The calls are dropped, as LangGraph does: a stored call must always have a result.
    return reply.model_copy(update={"content": content, "tool_calls": []})
