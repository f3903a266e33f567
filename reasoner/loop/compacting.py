"""The compaction step: summarize a role's older rounds before its model step, when the plan says so.

Both drivers run it the same way: the in-process ones (``tandem.reasoner.loop.drive``) before a
model step, with ``compact`` / ``acompact``; the Celery workers as a step of its own on the role's
queue (``tandem.tasks.steps.compact``), with ``summarize`` and ``compaction_of``. The plan decides
(``LoopPlan.compaction_due``); ``tandem.reasoner.context.summary`` builds the request and the entry.
A failed summary (the model raised after its own retries, or returned nothing usable) stores a
``dropped`` entry, so the step never fails the job, and the rounds are not asked for again.
"""

from __future__ import annotations

from tandem.reasoner.context.budget import ContextBudget, budget_of
from tandem.reasoner.context.compaction import Compaction
from tandem.reasoner.context.summary import Due, SummaryAsk, request_tokens, summary_ask, summary_entry
from tandem.reasoner.errors import ReasonerError
from tandem.reasoner.loop.plan import LoopPlan, compacted
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.model_service import ModelRequest, ModelService, agenerate

__all__ = ["MAX_SUMMARIES", "acompact", "ask_for", "compact", "compaction_of", "failure_of", "summarize"]

MAX_SUMMARIES = 8
"""The most summaries one model step waits for (each moves the summarized rounds on; a bound all the same)."""


def ask_for(due: Due, summarizer: ModelService, inputs: StepInputs, budget: ContextBudget) -> SummaryAsk:
    """The summary request of ``due``, fitted to the summarizing model's budget (else the role's)."""
    return summary_ask(
        inputs.task.goal, inputs.memory.get_messages(), due, budget_of(summarizer) or budget, inputs.tokens
    )


def failure_of(exc: BaseException) -> str:
    """What a failed summary's marker says of ``exc``."""
    return f"summarizing them failed: {type(exc).__name__}"


def compaction_of(due: Due, entry: ModelMessage, inputs: StepInputs, budget: ContextBudget) -> Compaction:
    """The ``memory_compacted`` report of storing ``entry`` for ``due``: the request's tokens before
    and after it (counted with the entry in the memory)."""
    span = entry.summary
    assert span is not None
    history = [*inputs.memory.get_messages(), entry]
    after = request_tokens(
        history, round_no=due.round, kind=due.role, fixed=due.fixed, budget=budget, cache=inputs.tokens
    )
    summarized = span.last - span.since + 1 if span.how == "summarized" else 0
    return Compaction(due.round, due.role, due.tokens, after, (span.first, span.last), summarized, span.how)


def summarize(ask: SummaryAsk, summarizer: ModelService) -> ModelMessage:
    """The entry of ``ask``: ``summarizer``'s reply, or a ``dropped`` entry when it fails."""
    try:
        reply = summarizer.generate(ask.sys_prompt, ask.messages)
    except ReasonerError as exc:
        return summary_entry(ask, None, failure_of(exc))
    return summary_entry(ask, reply)


async def asummarize(ask: SummaryAsk, summarizer: ModelService) -> ModelMessage:
    """``summarize`` for asyncio."""
    try:
        reply = await agenerate(summarizer, ModelRequest(ask.sys_prompt, ask.messages))
    except ReasonerError as exc:
        return summary_entry(ask, None, failure_of(exc))
    return summary_entry(ask, reply)


def _store(entry: ModelMessage, due: Due, inputs: StepInputs, budget: ContextBudget) -> None:
    report = compaction_of(due, entry, inputs, budget)
    if inputs.memory.add_message(entry):
        compacted(inputs.hooks, report)


def compact(
    plan: LoopPlan, step: Step, model: ModelService, summarizer: ModelService, inputs: StepInputs
) -> int:
    """Before model step ``step`` (whose model is ``model``): while the plan says a compaction is
    due, summarize with ``summarizer`` and store the entry. Returns the summaries stored."""
    budget = budget_of(model)
    done = 0
    while done < MAX_SUMMARIES and budget is not None:
        due = plan.compaction_due(step, inputs, budget)
        if due is None:
            break
        _store(summarize(ask_for(due, summarizer, inputs, budget), summarizer), due, inputs, budget)
        done += 1
    return done


async def acompact(
    plan: LoopPlan, step: Step, model: ModelService, summarizer: ModelService, inputs: StepInputs
) -> int:
    """``compact`` for asyncio: the summary calls awaited."""
    budget = budget_of(model)
    done = 0
    while done < MAX_SUMMARIES and budget is not None:
        due = plan.compaction_due(step, inputs, budget)
        if due is None:
            break
        _store(await asummarize(ask_for(due, summarizer, inputs, budget), summarizer), due, inputs, budget)
        done += 1
    return done
