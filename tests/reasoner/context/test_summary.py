"""Durable compaction in process: past ``compact_at`` of a role's budget its older rounds are
summarized by its model (or the one ``summarizers`` names), the summary is stored as a ``summary``
entry beside the originals, later requests read it in their place, no round is read by two
summaries, each role compacts its own view, and a failed or unusable summary falls back to the
drop with a marker. The Celery steps run the same plan (``tests/tasks/test_compact_step.py``)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from tandem.reasoner import DualModelReasoner, MonoModelReasoner, Task
from tandem.reasoner.context.budget import make_budget
from tandem.reasoner.context.counting import TokenCache
from tandem.reasoner.context.summary import (
    SUMMARY_PROMPT,
    compaction_due,
    latest_summary,
    stand_in_text,
    summary_ask,
    summary_entry,
)
from tandem.reasoner.errors import ConfigurationError, ModelCallError
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, SummaryOf
from tandem.reasoner.testing import ScriptedModelService
from tandem.toolkit import Tool
from tandem.toolkit.artifacts import ArtifactRef
from tests.reasoner.context.test_fitting import (
    NEEDLE,
    Recorder,
    actor_script,
    limit_of,
    read_page,
    sent_tokens,
    thinker_reply,
)


def summarizing(reply: Any, summaries: list[list[int]], answer: str | None = None) -> Any:
    """``reply`` for the job's requests; a summary request gets a short summary naming the rounds
    it read (kept in ``summaries``), or ``answer`` when given."""

    def respond(sys: str, messages: list[dict[str, Any]]) -> Any:
        if sys != SUMMARY_PROMPT:
            return reply(sys, messages)
        read = [int(n) for n in re.findall(r"^Round (\d+):", messages[-1]["content"], re.M)]
        summaries.append(read)
        if answer is not None:
            return answer
        return f"Read pages {read[0] - 1} to {read[-1] - 1}; each was lorem ipsum."

    return respond


def dual(
    rounds: int = 20,
    window: int = 4096,
    actor_window: int | None = None,
    *,
    answer: str | None = None,
    failing: bool = False,
) -> tuple[Any, ...]:
    thinker_sums: list[list[int]] = []
    actor_sums: list[list[int]] = []
    thinker = ScriptedModelService(
        summarizing(thinker_reply, thinker_sums, answer), context_tokens=window, role="thinker"
    )
    actor_reply = actor_script(rounds)
    if failing:

        def actor_reply_failing(sys: str, messages: list[dict[str, Any]]) -> Any:
            if sys == SUMMARY_PROMPT:
                actor_sums.append([])
                return ModelCallError("the host is down", model="scripted")
            return actor_reply(sys, messages)

        actor_fn: Any = actor_reply_failing
    else:
        actor_fn = summarizing(actor_reply, actor_sums, answer)
    actor = ScriptedModelService(actor_fn, context_tokens=actor_window or window, role="actor")
    hooks = Recorder()
    memory = InMemoryReasonerMemory()
    task = Task(goal=f"Read the book. {NEEDLE}", tools=[Tool.from_function(read_page)], max_rounds=rounds)
    outcome = DualModelReasoner(thinker=thinker, actor=actor, hooks=hooks).run(task, memory=memory)
    return outcome, thinker, actor, hooks, memory, thinker_sums, actor_sums


def job_calls(model: ScriptedModelService) -> list[dict[str, Any]]:
    return [c for c in model.calls if c["sys_prompt"] != SUMMARY_PROMPT]


def test_a_long_job_summarizes_its_older_rounds_and_completes_within_budget() -> None:
    outcome, thinker, actor, hooks, _, thinker_sums, actor_sums = dual()
    assert outcome.status == "completed", outcome.error
    assert outcome.rounds == 20
    assert thinker_sums and actor_sums  # both roles summarized
    for model in (thinker, actor):
        assert len(job_calls(model)) == 20
        assert max(sent_tokens(c) for c in model.calls) <= limit_of(model)  # summary requests too
    summarized = [c for c in hooks.compactions if c.how == "summarized"]
    assert summarized and all(c.tokens_after < c.tokens_before for c in summarized)


def test_no_round_is_read_by_two_summaries_and_each_moves_on() -> None:
    *_, thinker_sums, actor_sums = dual()
    for sums in (thinker_sums, actor_sums):
        read = [r for s in sums for r in s]
        assert len(read) == len(set(read))  # never twice
        assert read == sorted(read)  # each summary reads on from the previous one
        assert read[0] == 1  # from round 1 on


def test_the_summary_is_a_typed_entry_and_the_originals_stay() -> None:
    outcome, _, _, _, memory, _, _ = dual()
    messages = memory.get_messages()
    entries = [m for m in messages if m.role == "summary"]
    assert {e.summary.role for e in entries if e.summary} == {"thinker", "actor"}
    for entry in entries:
        assert entry.summary is not None and entry.summary.first == 0
        assert entry.round == entry.summary.last and entry.summary.tokens > 0
        assert entry.content.startswith("Read pages") and entry.summary.how == "summarized"
    for r in range(20):  # every original round is still stored
        assert memory.get_message(r, "thinker") is not None and memory.get_message(r, "actor") is not None
    assert outcome.usage.calls == sum(1 for m in messages if m.role in ("thinker", "actor", "summary"))


def test_later_requests_read_the_summary_in_place_of_the_rounds_and_keep_the_goal() -> None:
    _, thinker, _, _, memory, _, _ = dual()
    last = "\n".join(str(m["content"]) for m in job_calls(thinker)[-1]["messages"])
    entry = latest_summary(memory.get_messages(), "thinker")
    assert entry is not None and entry.content in last and "[Summary of rounds 1-" in last
    assert NEEDLE in last  # the goal is never summarized away
    assert "page 1: lorem" not in last  # round 2's original result is not re-sent
    assert "page 18: lorem" in last  # the latest action's result is


def test_the_thinker_and_the_actor_compact_separately_by_their_own_budget() -> None:
    _, _, actor, hooks, _, thinker_sums, actor_sums = dual(window=16000, actor_window=4096)
    assert actor_sums and len(thinker_sums) < len(actor_sums)
    roles = {c.role for c in hooks.compactions if c.how == "summarized"}
    assert "actor" in roles
    assert max(sent_tokens(c) for c in actor.calls) <= limit_of(actor)


def test_a_failing_summary_falls_back_to_the_drop_and_the_job_goes_on() -> None:
    outcome, _, actor, hooks, memory, _, actor_sums = dual(failing=True)
    assert outcome.status == "completed", outcome.error
    dropped = [
        m for m in memory.get_messages() if m.role == "summary" and m.summary and m.summary.role == "actor"
    ]
    assert dropped and all(m.summary and m.summary.how == "dropped" for m in dropped)
    assert "summarizing them failed: ModelCallError" in dropped[0].content
    assert len(actor_sums) == len(dropped)  # each failure stands: its rounds are not asked for again
    assert any(c.how == "dropped" and c.role == "actor" for c in hooks.compactions)
    assert max(sent_tokens(c) for c in job_calls(actor)) <= limit_of(actor)


@pytest.mark.parametrize(
    "answer", ["", "<think>only thinking</think>", "word " * 4000], ids=["empty", "thinking", "long"]
)
def test_an_unusable_summary_falls_back_to_the_drop(answer: str) -> None:
    outcome, *_, memory, _, _ = dual(answer=answer)
    assert outcome.status == "completed", outcome.error
    entries = [m for m in memory.get_messages() if m.role == "summary"]
    assert entries and all(m.summary and m.summary.how == "dropped" for m in entries)
    assert "[Context note:" in entries[0].content


def test_summaries_off_keep_the_drop_alone() -> None:
    model = ScriptedModelService(summarizing(actor_script(12), []), context_tokens=4096)
    outcome = MonoModelReasoner(model=model, compact_at=0).run(
        Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=12)
    )
    assert outcome.status == "completed"
    assert not [c for c in model.calls if c["sys_prompt"] == SUMMARY_PROMPT]


def test_a_summarizer_of_its_own_writes_the_summaries() -> None:
    sums: list[list[int]] = []
    small = ScriptedModelService(summarizing(lambda s, m: "unused", sums), context_tokens=8000)
    model = ScriptedModelService(actor_script(12), context_tokens=4096)
    outcome = MonoModelReasoner(model=model, summarizers={"actor": small}).run(
        Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=12)
    )
    assert outcome.status == "completed", outcome.error
    assert sums and not [c for c in model.calls if c["sys_prompt"] == SUMMARY_PROMPT]


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.8", True])
def test_compact_at_must_be_a_share(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="compact_at"):
        MonoModelReasoner(model=ScriptedModelService([]), compact_at=bad)


def test_an_async_run_summarizes_too() -> None:
    sums: list[list[int]] = []
    model = ScriptedModelService(summarizing(actor_script(12), sums), context_tokens=4096)
    outcome = asyncio.run(
        MonoModelReasoner(model=model).arun(
            Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=12)
        )
    )
    assert outcome.status == "completed", outcome.error
    assert sums


def test_a_persons_messages_are_never_summarized() -> None:
    sums: list[list[int]] = []
    model = ScriptedModelService(summarizing(actor_script(12), sums), context_tokens=4096)
    memory = InMemoryReasonerMemory(
        [ModelMessage(role="person", round=1, content="Also count the pages.", message_id="m1")]
    )
    outcome = MonoModelReasoner(model=model).run(
        Task(goal="Read.", tools=[Tool.from_function(read_page)], max_rounds=12), memory=memory
    )
    assert outcome.status == "completed" and sums
    summaries = [c for c in model.calls if c["sys_prompt"] == SUMMARY_PROMPT]
    assert all("Also count the pages." not in c["messages"][-1]["content"] for c in summaries)
    last = "\n".join(str(m["content"]) for m in job_calls(model)[-1]["messages"])
    assert "Also count the pages." in last


def test_the_persons_answers_and_artifact_handles_survive_every_summary() -> None:
    ref = ArtifactRef(handle="r2-c1-0123456789", chars=20000, bytes=20000)
    results = [
        FunctionCallResult(
            index=1,
            name="ask_person",
            args={"question": "Which edition?"},
            status=FunctionCallStatus.SUCCEEDED,
            output="The second.",
        ),
        FunctionCallResult(
            index=2, name="fetch", status=FunctionCallStatus.SUCCEEDED, output="...", artifact=ref
        ),
    ]
    history = [ModelMessage(role="tool", round=2, content="...", function_results=results)]
    span = SummaryOf(role="actor", first=0, last=3, since=0, tokens=5)
    entry = ModelMessage(role="summary", round=3, content="Read four pages.", summary=span)
    text = stand_in_text(entry, history)
    assert "Read four pages." in text and "rounds 1-4" in text
    assert "'Which edition?'" in text and "The second." in text
    assert "'r2-c1-0123456789'" in text and "read_artifact" in text


def _history(rounds: int) -> list[ModelMessage]:
    out = []
    for r in range(rounds):
        out += [
            ModelMessage(role="actor", round=r, content=f"reading {r}"),
            ModelMessage(role="tool", round=r, content=read_page(r)),
        ]
    return out


def test_the_choice_depends_only_on_the_stored_messages() -> None:
    budget = make_budget(4096, "setting")
    assert budget is not None
    history = _history(6)
    due = compaction_due(
        history, round_no=6, kind="actor", fixed=500, budget=budget, cache=TokenCache(), at=0.8
    )
    again = compaction_due(
        history, round_no=6, kind="actor", fixed=500, budget=budget, cache=TokenCache(), at=0.8
    )
    assert due is not None and due == again and (due.since, due.last) == (0, 4)
    ask = summary_ask("Read.", history, due, budget, TokenCache())
    assert ask == summary_ask("Read.", history, due, budget, TokenCache())
    assert (
        compaction_due(history, round_no=6, kind="actor", fixed=500, budget=budget, cache=TokenCache(), at=0)
        is None
    )
    # a summarizer with a small budget reads fewer rounds; the next summary reads on from there
    assert ask.since == 0 and ask.last < due.last
    entry = summary_entry(ask, ModelMessage(role="actor", content="Read the first pages."))
    assert entry.summary is not None and entry.summary.last == ask.last
    later = compaction_due(
        [*history, entry], round_no=6, kind="actor", fixed=500, budget=budget, cache=TokenCache(), at=0.8
    )
    assert later is not None and later.since == ask.last + 1
    # once every round it could leave out is summarized, none is due
    whole = summary_ask("Read.", history, due, None, TokenCache())
    assert (whole.since, whole.last) == (0, 4)
    done = [*history, summary_entry(whole, ModelMessage(role="actor", content="Read pages 0-4."))]
    assert (
        compaction_due(done, round_no=6, kind="actor", fixed=500, budget=budget, cache=TokenCache(), at=0.8)
        is None
    )


def test_a_round_too_long_to_summarize_alone_is_cut_so_compaction_moves_on() -> None:
    small = make_budget(2048, "setting")
    assert small is not None
    history = [ModelMessage(role="tool", round=0, content="word " * 9000), *_history(3)[2:]]
    due = compaction_due(
        history, round_no=3, kind="actor", fixed=100, budget=small, cache=TokenCache(), at=0.8
    )
    assert due is not None
    ask = summary_ask("Read.", history, due, small, TokenCache())
    assert (ask.since, ask.last) == (0, 0) and "cut: too long" in ask.messages[-1]["content"]
    assert small.tokenizer.count(ask.messages[-1]["content"]) <= small.limit


def test_while_it_fits_a_summary_waits_until_the_open_rounds_are_worth_a_call() -> None:
    budget = make_budget(4096, "setting")
    assert budget is not None
    small = [ModelMessage(role="actor", round=0, content="reading 0")]
    latest = [ModelMessage(role="tool", round=1, content=read_page(1))]
    history = [*small, *latest]
    kwargs: dict[str, Any] = {
        "round_no": 2,
        "kind": "actor",
        "budget": budget,
        "cache": TokenCache(),
        "at": 0.8,
    }
    # past 0.8 of the budget, within it, and round 0 (the only one open) is far below 0.2 of it
    assert compaction_due(history, fixed=1900, **kwargs) is None
    # over the budget: even a small open round is summarized rather than dropped
    due = compaction_due(history, fixed=2500, **kwargs)
    assert due is not None and (due.since, due.last) == (0, 0)


def test_a_stand_in_lists_the_latest_handles_only() -> None:
    from tandem.reasoner.context.summary import MAX_HANDLES

    history = []
    for r in range(30):
        ref = ArtifactRef(handle=f"r{r}-c1-{r:010d}", chars=9000, bytes=9000)
        result = FunctionCallResult(
            index=1, name="fetch", status=FunctionCallStatus.SUCCEEDED, output="...", artifact=ref
        )
        history.append(ModelMessage(role="tool", round=r, content="...", function_results=[result]))
    span = SummaryOf(role="actor", first=0, last=29, since=20, tokens=5)
    text = stand_in_text(ModelMessage(role="summary", round=29, content="Fetched.", summary=span), history)
    assert f"'r29-c1-{29:010d}'" in text and f"'r{30 - MAX_HANDLES}-c1-" in text
    assert f"'r{29 - MAX_HANDLES}-c1-" not in text and f"and {30 - MAX_HANDLES} earlier ones" in text
