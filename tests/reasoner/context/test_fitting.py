"""Trimming a role's view to its budget, in process (the Celery steps run the same plan): a long
job completes with no request over the budget; the goal, the person's messages, the latest round
and the person's answers stay; the stored memory is never changed; each role trims by its own
budget; ``memory_compacted`` is reported when the cut moves; what cannot be left out and does
not fit fails the step with both numbers. Summaries are off here (``compact_at=0``): the drop
alone (``test_summary`` has them)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tandem.reasoner import DualModelReasoner, MonoModelReasoner, ReActReasoner, ReasonerHooks, Task
from tandem.reasoner.context.budget import ContextBudget, budget_of
from tandem.reasoner.context.compaction import Compaction, LeftOut, StandIn
from tandem.reasoner.context.counting import ESTIMATE
from tandem.reasoner.errors import ContextLimitError
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import ModelMessage, NativeToolCall
from tandem.reasoner.testing import ScriptedModelService
from tandem.toolkit import Tool

PAGE = "lorem ipsum dolor sit amet " * 75  # about 1,000 tokens by the estimate
NEEDLE = "The secret number is forty-two."


def read_page(n: int) -> str:
    """Read page n of the book."""
    return f"page {n}: {PAGE}"


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.compactions: list[Compaction] = []

    def memory_compacted(self, compaction: Compaction) -> None:
        self.compactions.append(compaction)


def sent_tokens(call: dict[str, Any], tools: list[Tool] | None = None) -> int:
    """A request's tokens as the model read it, counted whole by the same tokenizer (the
    estimate) plus four tokens a message for the chat template."""
    messages = call["messages"]
    text = [call["sys_prompt"]] + [str(m.get("content") or "") for m in messages]
    for m in messages:
        text += [json.dumps(c) for c in m.get("tool_calls") or ()]
    total = sum(ESTIMATE.count(t) for t in text) + 4 * (len(messages) + 1)
    if tools:
        total += ESTIMATE.count(json.dumps([t.openai_schema() for t in tools]))
    return total


def limit_of(model: ScriptedModelService) -> int:
    budget = budget_of(model)
    assert budget is not None
    return budget.limit


def thinker_reply(sys: str, messages: list[dict[str, Any]]) -> str:
    return "<instruction>Read the next page.</instruction>"


def actor_script(rounds: int):  # type: ignore[no-untyped-def]
    def reply(sys: str, messages: list[dict[str, Any]]) -> str:
        text = "\n".join(str(m.get("content")) for m in messages)
        now = int(re.findall(r"\[Round (\d+) of", text)[-1]) - 1  # this round, from 0
        if now == rounds - 1:
            return "<deliverable>read them all</deliverable>"
        return (
            f'<action><function_call>{{"name": "read_page", "args": {{"n": {now}}}}}</function_call></action>'
        )

    return reply


def dual(rounds: int = 20, window: int = 4096, actor_window: int | None = None) -> tuple[Any, ...]:
    thinker = ScriptedModelService(thinker_reply, context_tokens=window, role="thinker")
    actor = ScriptedModelService(actor_script(rounds), context_tokens=actor_window or window, role="actor")
    hooks = Recorder()
    memory = InMemoryReasonerMemory()
    task = Task(goal=f"Read the book. {NEEDLE}", tools=[Tool.from_function(read_page)], max_rounds=rounds)
    outcome = DualModelReasoner(thinker=thinker, actor=actor, hooks=hooks, compact_at=0).run(
        task, memory=memory
    )
    return outcome, thinker, actor, hooks, memory


def test_a_long_dual_job_completes_with_no_request_over_either_budget() -> None:
    outcome, thinker, actor, hooks, _ = dual()
    assert outcome.status == "completed", outcome.error
    assert outcome.rounds == 20
    for model in (thinker, actor):
        assert len(model.calls) == 20
        assert max(sent_tokens(c) for c in model.calls) <= limit_of(model)
    # without trimming the last requests would be five times the budget
    assert hooks.compactions and max(c.tokens_before for c in hooks.compactions) > 3 * limit_of(actor)


def test_the_stored_memory_keeps_every_round() -> None:
    _, _, _, _, memory = dual()
    stored = memory.get_messages()
    assert [m.round for m in stored if m.role == "tool"] == list(range(19))
    assert sum(PAGE in m.content for m in stored) == 19
    assert "left out" not in "".join(m.content for m in stored)


def test_the_goal_the_latest_round_and_a_marker_are_in_every_trimmed_request() -> None:
    _, thinker, actor, _, _ = dual()
    last = actor.calls[-1]["messages"]
    assert NEEDLE in last[0]["content"] and "left out here" in last[0]["content"]
    text = "\n".join(str(m["content"]) for m in last)
    assert "page 18:" in text  # the latest tool results (round 19's)
    assert "page 0:" not in text
    assert "The Thinker's instruction" in text
    for call in thinker.calls[-5:]:
        assert NEEDLE in call["messages"][0]["content"]
        assert (
            "page 18:" in "\n".join(str(m["content"]) for m in call["messages"])
            or call is not thinker.calls[-1]
        )


def test_compactions_name_the_rounds_left_out_and_come_when_the_cut_moves() -> None:
    _, _, _, hooks, _ = dual()
    thinker_cuts = [c for c in hooks.compactions if c.role == "thinker"]
    assert thinker_cuts[0].rounds_dropped[0] == 0 and thinker_cuts[0].how == "dropped"
    assert all(c.rounds_summarized == 0 and c.tokens_after < c.tokens_before for c in hooks.compactions)
    lasts = [c.rounds_dropped[1] for c in thinker_cuts]
    assert lasts == sorted(set(lasts))  # one report per move, moving on
    assert all(c.rounds_dropped[1] <= c.round - 2 for c in hooks.compactions)  # the latest round is kept


def test_each_role_trims_its_own_view_by_its_own_budget() -> None:
    outcome, thinker, actor, hooks, _ = dual(window=65536, actor_window=4096)
    assert outcome.status == "completed", outcome.error
    assert {c.role for c in hooks.compactions} == {"actor"}
    assert max(sent_tokens(c) for c in actor.calls) <= limit_of(actor)
    assert max(sent_tokens(c) for c in thinker.calls) > limit_of(actor)  # the Thinker saw more


def test_without_a_budget_requests_are_sent_whole() -> None:
    thinker = ScriptedModelService(thinker_reply)
    actor = ScriptedModelService(actor_script(6))
    task = Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=6)
    assert DualModelReasoner(thinker=thinker, actor=actor).run(task).status == "completed"
    assert "page 0:" in "\n".join(str(m["content"]) for m in actor.calls[-1]["messages"])


def test_a_persons_messages_are_never_left_out() -> None:
    memory = InMemoryReasonerMemory()
    memory.add_message(ModelMessage(role="person", round=1, content="Also count the pages.", message_id="m1"))
    thinker = ScriptedModelService(thinker_reply, context_tokens=4096)
    actor = ScriptedModelService(actor_script(12), context_tokens=4096)
    hooks = Recorder()
    task = Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=12)
    outcome = DualModelReasoner(thinker=thinker, actor=actor, hooks=hooks, compact_at=0).run(
        task, memory=memory
    )
    assert outcome.status == "completed", outcome.error
    assert any(c.rounds_dropped[1] >= 1 for c in hooks.compactions if c.role == "thinker")
    last = "\n".join(str(m["content"]) for m in thinker.calls[-1]["messages"])
    assert "Also count the pages." in last


def test_the_persons_answers_in_rounds_left_out_are_kept_in_the_marker() -> None:
    from tandem.reasoner.context.compaction import DROP_ROUNDS
    from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus

    answered = ModelMessage(
        role="tool",
        round=2,
        content="...",
        function_results=[
            FunctionCallResult(
                index=1,
                name="ask_person",
                args={"question": "Which edition?"},
                status=FunctionCallStatus.SUCCEEDED,
                output="The second.",
            )
        ],
    )
    stand_in = DROP_ROUNDS.stand_in(LeftOut(0, 3, [answered], 5000, "actor", 3072))
    assert "rounds 1-4" in stand_in.text and "5,000 tokens" in stand_in.text and "3,072" in stand_in.text
    assert "'Which edition?'" in stand_in.text and "The second." in stand_in.text


def test_a_mono_job_trims_too() -> None:
    model = ScriptedModelService(actor_script(15), context_tokens=4096)
    hooks = Recorder()
    task = Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=15)
    outcome = MonoModelReasoner(model=model, hooks=hooks, compact_at=0).run(task)
    assert outcome.status == "completed", outcome.error
    assert hooks.compactions
    assert max(sent_tokens(c) for c in model.calls) <= limit_of(model)


def test_a_react_job_drops_calls_with_their_results() -> None:
    asked: list[int] = []

    def reply(sys: str, messages: list[dict[str, Any]]) -> ModelMessage:
        n = len(asked)
        asked.append(n)
        if n >= 14:
            return ModelMessage(role="actor", content="done")
        call = NativeToolCall(id=f"c{n}", name="read_page", arguments=json.dumps({"n": n}))
        return ModelMessage(role="actor", content="", tool_calls=[call])

    tools = [Tool.from_function(read_page)]
    model = ScriptedModelService(reply, context_tokens=4096)
    hooks = Recorder()
    outcome = ReActReasoner(model=model, max_steps=40, hooks=hooks, compact_at=0).run(
        Task(goal="Read.", tools=tools)
    )
    assert outcome.status == "completed", outcome.error
    assert hooks.compactions
    for call in model.calls:
        assert sent_tokens(call, tools) <= limit_of(model)
        ids = [c["id"] for m in call["messages"] for c in m.get("tool_calls") or ()]
        answered = [m["tool_call_id"] for m in call["messages"] if m["role"] == "tool"]
        assert ids == answered  # every call shown has its result, and no result lacks its call


def test_when_what_must_stay_does_not_fit_the_step_fails_naming_both_numbers() -> None:
    def big_page(n: int) -> str:
        """Read a big page."""
        return PAGE * 3

    thinker = ScriptedModelService(thinker_reply, context_tokens=4096, role="thinker")
    actor = ScriptedModelService(actor_script(5), context_tokens=4096, role="actor")
    task = Task(goal="Read.", tools=[Tool.from_function(big_page, name="read_page")], max_rounds=5)
    outcome = DualModelReasoner(thinker=thinker, actor=actor, compact_at=0).run(task)
    assert outcome.status == "failed"
    assert outcome.error is not None
    assert "ContextLimitError" in outcome.error or "needs" in outcome.error
    assert re.search(r"needs [\d,]+ tokens", outcome.error) and "budget of 3,072 tokens" in outcome.error
    assert "_CONTEXT_TOKENS" in outcome.error and "have the tools return less" in outcome.error
    for model in (thinker, actor):  # the request over the budget was never sent
        assert all(sent_tokens(c) <= limit_of(model) for c in model.calls)


def test_the_error_carries_both_numbers() -> None:
    from tandem.reasoner.context.compaction import DROP_ROUNDS
    from tandem.reasoner.context.counting import TokenCache
    from tandem.reasoner.context.fitting import fit_history

    budget = ContextBudget(1000, 250, "setting", role="actor")
    with pytest.raises(ContextLimitError) as caught:
        fit_history(
            [], round_no=0, kind="actor", fixed=900, budget=budget, cache=TokenCache(), compactor=DROP_ROUNDS
        )
    assert (caught.value.needed, caught.value.budget) == (900, 750)  # what is always kept, and the budget
    assert "900 tokens" in str(caught.value) and "750 tokens" in str(caught.value)


def test_a_stand_in_too_long_to_fit_gives_way_to_a_terse_marker_or_none_never_a_failure() -> None:
    from tandem.reasoner.context.counting import TokenCache
    from tandem.reasoner.context.fitting import _counts, fit_history, visible

    class Verbose:
        def stand_in(self, left_out: LeftOut) -> StandIn:
            return StandIn(PAGE * 2)  # never fits beside what is always kept

    history = []
    for r in range(4):
        history += [
            ModelMessage(role="thinker", round=r, content="<instruction>go</instruction>"),
            ModelMessage(role="actor", round=r, content="acted"),
            ModelMessage(role="tool", round=r, content=PAGE),
        ]
    probe = ContextBudget(100_000, 10, "setting", role="thinker")
    total, per_round = _counts(visible(history, 4, "thinker"), 500, 4, probe, TokenCache())
    kept = total - sum(per_round.values())  # rounds 2 and 3, and the fixed part
    for room, marked in ((200, True), (0, False)):
        budget = ContextBudget(kept + room + 10, 10, "setting", role="thinker")
        fitted = fit_history(
            history,
            round_no=4,
            kind="thinker",
            fixed=500,
            budget=budget,
            cache=TokenCache(),
            compactor=Verbose(),
        )
        assert fitted.tokens <= budget.limit, (fitted.tokens, budget.limit)
        assert fitted.stand_in is not None and fitted.stand_in.text.startswith("[Rounds") == marked


def test_a_compactor_decides_what_stands_in() -> None:
    class Summarizer:
        def stand_in(self, left_out: LeftOut) -> StandIn:
            return StandIn(f"Summary of rounds {left_out.first}-{left_out.last}.", "summarized", 3)

    from tandem.reasoner.loop.rounds import DualPlan
    from tandem.reasoner.loop.step import Step, StepInputs

    memory = InMemoryReasonerMemory()
    for r in range(6):
        memory.add_message(ModelMessage(role="thinker", round=r, content="<instruction>go</instruction>"))
        memory.add_message(ModelMessage(role="actor", round=r, content="acted"))
        memory.add_message(ModelMessage(role="tool", round=r, content=PAGE))
    hooks = Recorder()
    inputs = StepInputs(Task(goal="Read."), memory, hooks=hooks, compactor=Summarizer())
    budget = ContextBudget(3000, 500, "setting", role="thinker")
    request = DualPlan().request(Step(6, "thinker"), inputs, budget)
    assert "Summary of rounds 0-" in request.messages[0]["content"]
    assert hooks.compactions[0].how == "summarized" and hooks.compactions[0].rounds_summarized == 3


def test_a_compaction_is_an_event_on_the_trace_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tandem.reasoner import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        with tracing.span("tandem.step"):
            _, _, _, hooks, _ = dual(rounds=8)
    finally:
        tracing.uninstall()
    (step,) = [s for s in exporter.get_finished_spans() if s.name == "tandem.step"]
    events = [e for e in step.events if e.name == "tandem.memory_compacted"]
    assert len(events) == len(hooks.compactions) > 0
    first = dict(events[0].attributes or {})
    reported = hooks.compactions[0]
    assert first["tandem.role"] == reported.role and first["tandem.round"] == reported.round
    assert first["tandem.tokens_before"] == reported.tokens_before
    assert (
        first["tandem.summary_of_rounds"] == f"0-{reported.summary_of_rounds[1]}"
        and first["tandem.how"] == "dropped"
    )


def test_a_summary_too_long_to_fit_goes_with_a_marker_naming_its_rounds_and_is_reported() -> None:
    """A summary entry whose text does not fit beside what is always kept is left out of the
    request like the rounds after it, and the marker names them all, the summary's included (the
    person's answer in them quoted); before, the request lost rounds 1-4 without a word and no
    compaction was reported (tests/integration/test_breaking_summaries.py found it)."""
    from tandem.reasoner.context.compaction import DROP_ROUNDS
    from tandem.reasoner.context.counting import TokenCache
    from tandem.reasoner.context.fitting import fit_history
    from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, SummaryOf

    history = []
    for r in range(6):
        history += [
            ModelMessage(role="thinker", round=r, content="<instruction>go</instruction>"),
            ModelMessage(role="actor", round=r, content="acted"),
            ModelMessage(role="tool", round=r, content=PAGE),
        ]
    asked = FunctionCallResult(
        index=1,
        name="ask_person",
        args={"question": "Which one?"},
        status=FunctionCallStatus.SUCCEEDED,
        output="BLUE",
    )
    history[2] = ModelMessage(role="tool", round=0, content=PAGE, function_results=[asked])
    span = SummaryOf(role="thinker", first=0, last=3, since=0, tokens=2500, summarized_to=3)
    summary = ModelMessage(role="summary", round=3, content=PAGE * 4, summary=span)  # about 2,700 tokens
    history.append(summary)
    budget = ContextBudget(3500, 500, "setting", role="thinker")  # rounds 4 and 5 fit, the summary not
    fitted = fit_history(
        history,
        round_no=6,
        kind="thinker",
        fixed=300,
        budget=budget,
        cache=TokenCache(),
        compactor=DROP_ROUNDS,
        summary=summary,
    )
    assert fitted.tokens <= budget.limit
    assert fitted.stand_in is not None and PAGE * 4 not in fitted.stand_in.text
    assert "rounds 1-5 of this conversation" in fitted.stand_in.text, fitted.stand_in.text
    assert "the person answered: BLUE" in fitted.stand_in.text
    assert sorted({m.round for m in fitted.history}) == [5]
    assert fitted.compaction is not None
    assert (fitted.compaction.summary_of_rounds, fitted.compaction.how) == ((0, 4), "dropped")
