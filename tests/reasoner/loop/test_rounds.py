"""``DualPlan`` and ``MonoPlan``: views, idempotent model steps, decisions, results, outcomes."""

from __future__ import annotations

from itertools import pairwise

import pytest

from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.loop.calls import calls_of, native_to_call, tool_context
from tandem.reasoner.loop.rounds import DualPlan, MonoPlan, delivered
from tandem.reasoner.loop.step import Step, StepInputs, finalize
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import (
    FunctionCallResult,
    FunctionCallStatus,
    ModelMessage,
    NativeToolCall,
    Role,
    Usage,
    total_usage,
)
from tandem.reasoner.prompts import round_note
from tandem.reasoner.task import Task
from tandem.reasoner.testing import ScriptedModelService

DUAL, MONO = DualPlan(), MonoPlan()
THINK_0 = "<deep_thinking>plan</deep_thinking><instruction>count</instruction><input>the text</input>"
ACT_0 = "<shallow_thinking>easy</shallow_thinking><action>counting</action>"
RESULT_0 = (
    "<function_call_result>\ncall 1: word_count()\nstatus: succeeded\noutput:\n7\n</function_call_result>"
)


def history() -> list[ModelMessage]:
    return [
        ModelMessage(role="thinker", round=0, content=THINK_0, reasoning="SECRET-T0"),
        ModelMessage(role="actor", round=0, content=ACT_0, reasoning="SECRET-A0"),
        ModelMessage(role="tool", round=0, content=RESULT_0),
        ModelMessage(
            role="thinker", round=1, content="<instruction>multiply</instruction>", reasoning="SECRET-T1"
        ),
        ModelMessage(role="actor", round=1, content="<action>84</action>", reasoning="SECRET-A1"),
    ]


def text_of(chat: list[dict[str, object]]) -> str:
    return "\n".join(str(m["content"]) for m in chat)


def result(
    index: int, output: str = "ok", status: FunctionCallStatus = FunctionCallStatus.SUCCEEDED
) -> FunctionCallResult:
    return FunctionCallResult(index=index, name="t", status=status, output=output)


# -- round notes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("round_no", "max_rounds", "role", "expected"),
    [
        pytest.param(0, 3, "actor", "[Round 1 of 3; 2 rounds left after this one.]", id="first"),
        pytest.param(1, 3, "thinker", "[Round 2 of 3; 1 round left after this one.]", id="singular"),
        pytest.param(
            2,
            3,
            "actor",
            "[Round 3 of 3; 0 rounds left after this one.] This is the last round: write the "
            "<deliverable> now with what you have.",
            id="last-actor",
        ),
        pytest.param(
            0,
            1,
            "thinker",
            "[Round 1 of 1; 0 rounds left after this one.] This is the last round: write TASK_DONE and "
            "tell the Actor what to deliver.",
            id="last-thinker",
        ),
    ],
)
def test_round_note(round_no: int, max_rounds: int, role: str, expected: str) -> None:
    assert round_note(round_no, max_rounds, role) == expected


# -- views --------------------------------------------------------------------------------------


def test_thinker_view_shows_earlier_rounds_and_the_round_note() -> None:
    task = Task(goal="G", context="C", max_rounds=3)
    chat = DUAL.thinker_view(task, history(), 1)
    assert chat == [
        {"role": "user", "content": "<task>\n<goal>G</goal>\n<context>C</context>\n</task>"},
        {"role": "assistant", "content": THINK_0},
        {
            "role": "user",
            "content": f"The Actor replied:\n<action>counting</action>\n\n{RESULT_0}\n\n"
            "[Round 2 of 3; 1 round left after this one.]",
        },
    ]


def test_actor_view_in_dual_mode_puts_the_round_note_before_the_instruction() -> None:
    task = Task(goal="G", max_rounds=3)
    chat = DUAL.actor_view(task, history(), 1)
    assert [m["role"] for m in chat] == ["user", "assistant", "user"]
    assert chat[0]["content"] == (
        "<task>\n<goal>G</goal>\n</task>\n\n"
        "The Thinker's instruction:\n<instruction>count</instruction>\n<input>the text</input>"
    )
    assert chat[1]["content"] == ACT_0
    assert chat[2]["content"] == (
        f"{RESULT_0}\n\n[Round 2 of 3; 1 round left after this one.]\n\n"
        "The Thinker's instruction:\n<instruction>multiply</instruction>"
    )


def test_actor_view_in_mono_mode_ends_with_the_round_note() -> None:
    task = Task(goal="G", max_rounds=2)
    mono_history = [m for m in history() if m.role != "thinker"]
    chat = MONO.actor_view(task, mono_history, 1)
    assert chat[-1]["role"] == "user"
    assert str(chat[-1]["content"]).endswith(round_note(1, 2, "actor"))
    assert "This is the last round" in str(chat[-1]["content"])


def test_a_thinker_without_an_instruction_tag_is_passed_on_without_its_thinking() -> None:
    task = Task(goal="G")
    messages = [ModelMessage(role="thinker", round=0, content="<think>hidden</think>Just count the words.")]
    chat = DUAL.actor_view(task, messages, 0)
    assert "The Thinker's instruction:\nJust count the words." in text_of(chat)
    assert "hidden" not in text_of(chat)


def test_views_never_hold_reasoning_or_later_messages() -> None:
    task = Task(goal="G", max_rounds=5)
    for chat in (DUAL.thinker_view(task, history(), 1), DUAL.actor_view(task, history(), 1)):
        assert "SECRET" not in text_of(chat)
        assert "<action>84</action>" not in text_of(chat)  # round 1's Actor reply is in the future


def test_views_alternate_roles() -> None:
    task = Task(goal="G", max_rounds=5)
    for chat in (
        DUAL.thinker_view(task, history(), 2),
        DUAL.actor_view(task, history(), 1),
        MONO.actor_view(task, history(), 2),
    ):
        roles = [m["role"] for m in chat]
        assert all(a != b for a, b in pairwise(roles)), roles


# -- steps ----------------------------------------------------------------------------------------


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.replies: list[tuple[int, str]] = []

    def model_replied(self, message: ModelMessage) -> None:
        self.replies.append((message.round, message.role))


def test_thinker_and_actor_steps_call_the_model_once_per_round() -> None:
    thinker = ScriptedModelService(["<think>why</think><instruction>go</instruction>"], name="T")
    actor = ScriptedModelService(["<action>went</action>"], name="A")
    memory = InMemoryReasonerMemory()
    hooks = Recorder()
    task = Task(goal="G")

    inputs = StepInputs(task, memory, hooks=hooks)
    t1 = DUAL.run_model(Step(0, "thinker"), thinker, inputs)
    t2 = DUAL.run_model(Step(0, "thinker"), thinker, inputs)
    a1 = DUAL.run_model(Step(0, "actor"), actor, inputs)
    a2 = DUAL.run_model(Step(0, "actor"), actor, inputs)

    assert (len(thinker.calls), len(actor.calls)) == (1, 1)
    assert t1 == t2 and a1 == a2
    assert (t1.role, t1.round, t1.reasoning, t1.model) == ("thinker", 0, "why", "T")
    assert (a1.role, a1.round, a1.model) == ("actor", 0, "A")
    assert hooks.replies == [(0, "thinker"), (0, "actor")]  # published once each


def test_a_concurrent_duplicate_returns_the_message_stored_first() -> None:
    """Two workers ran the same step; the one that lost the write returns the winner's message."""

    class RacingMemory(InMemoryReasonerMemory):
        def __init__(self) -> None:
            super().__init__()
            self.looked = False

        def get_message(self, round_no: int, role: Role) -> ModelMessage | None:
            if not self.looked:  # the step's first look finds nothing; then the other worker writes
                self.looked = True
                self.add_message(ModelMessage(role="actor", round=round_no, content="the winner"))
                return None
            return super().get_message(round_no, role)

    memory = RacingMemory()
    hooks = Recorder()
    inputs = StepInputs(Task(goal="G"), memory, hooks=hooks)
    message = DUAL.run_model(Step(0, "actor"), ScriptedModelService(["the loser"]), inputs)
    assert message.content == "the winner"
    assert [m.content for m in memory.get_messages()] == ["the winner"]
    assert hooks.replies == []  # the loser stored nothing, so it publishes nothing


def test_the_actor_step_uses_the_prompt_of_its_kind() -> None:
    dual, mono = ScriptedModelService(["x"]), ScriptedModelService(["x"])
    DUAL.run_model(Step(0, "actor"), dual, StepInputs(Task(goal="G"), InMemoryReasonerMemory()))
    MONO.run_model(Step(0, "actor"), mono, StepInputs(Task(goal="G"), InMemoryReasonerMemory()))
    assert dual.calls[0]["sys_prompt"].startswith("You are the Actor")
    assert mono.calls[0]["sys_prompt"].startswith("You solve the task on your own")


# -- planning --------------------------------------------------------------------------------------

CALL = '<action><function_call>{"name": "t", "args": {}}</function_call></action>'


@pytest.mark.parametrize(
    ("content", "round_no", "kind", "n_calls"),
    [
        pytest.param("<deliverable>done</deliverable>", 0, "deliver", 0, id="deliverable"),
        pytest.param(f"{CALL}<deliverable>done</deliverable>", 0, "deliver", 0, id="deliverable-wins"),
        pytest.param(CALL + CALL, 0, "tools", 2, id="calls"),
        pytest.param("<action>thinking aloud</action>", 0, "continue", 0, id="neither"),
        pytest.param("<think><deliverable>no</deliverable></think>plain", 0, "continue", 0, id="thinking"),
        pytest.param(CALL, 2, "truncated", 0, id="calls-on-the-last-round"),
        pytest.param("<action>nothing</action>", 2, "truncated", 0, id="last-round"),
        pytest.param("<deliverable>late</deliverable>", 2, "deliver", 0, id="deliverable-on-last-round"),
    ],
)
def test_what_follows_the_actor(content: str, round_no: int, kind: str, n_calls: int) -> None:
    expected = {
        "deliver": finalize(round_no, "completed"),
        "truncated": finalize(round_no, "truncated"),
        "tools": Step(round_no, "tools", calls=n_calls),
        "continue": Step(round_no + 1, "thinker"),
    }[kind]
    task, reply = Task(goal="G", max_rounds=3), ModelMessage(role="actor", content=content)
    assert DUAL.after_model(Step(round_no, "actor"), reply, task) == expected
    mono = expected if kind != "continue" else Step(round_no + 1, "actor")
    assert MONO.after_model(Step(round_no, "actor"), reply, task) == mono


def test_delivered_ignores_a_deliverable_in_thinking() -> None:
    assert delivered(ModelMessage(role="actor", content="<deliverable>x</deliverable>"))
    assert not delivered(ModelMessage(role="actor", content="<shallow_thinking><deliverable>x</deliverable>"))


def test_the_tools_step_counts_the_calls_the_tool_step_runs() -> None:
    """A reply with native calls (a Harmony parser turns gpt-oss's ``to=functions.X`` messages into
    them) opens a tools step of as many calls as ``calls_of`` gives the tool tasks, not as many
    ``<function_call>`` blocks as its text holds."""
    reply = ModelMessage(
        role="actor",
        content=CALL,
        tool_calls=[NativeToolCall(id="1", name="add", arguments="{}"), NativeToolCall(id="2", name="t")],
    )
    task = Task(goal="G", max_rounds=3)
    for plan in (DUAL, MONO):
        assert plan.after_model(Step(0, "actor"), reply, task) == Step(0, "tools", calls=2)
        assert len(plan.calls_of(reply)) == 2


def test_calls_of_reads_blocks_or_native_calls() -> None:
    blocks = ModelMessage(role="actor", content=CALL)
    assert [(c.name, c.args) for c in calls_of(blocks)] == [("t", {})]

    native = ModelMessage(
        role="actor",
        content=CALL,  # native calls win over blocks
        tool_calls=[
            NativeToolCall(id="1", name="add", arguments='{"a": 1}'),
            NativeToolCall(id="2", name="add", arguments="{not json"),
            NativeToolCall(id="3", name="add", arguments="[1]"),
            NativeToolCall(id="4", name="add", arguments=""),
        ],
    )
    calls = calls_of(native)
    assert [(c.name, c.args, c.error is None) for c in calls] == [
        ("add", {"a": 1}, True),
        ("add", {}, False),
        ("add", {}, False),
        ("add", {}, True),
    ]
    assert "not valid JSON" in str(calls[1].error) and "must be a JSON object" in str(calls[2].error)
    assert native_to_call(native.tool_calls[0]).raw == '{"a": 1}'


def test_tool_context_carries_job_round_and_metadata() -> None:
    task = Task(goal="G", job_id="job-3", metadata={"tenant": "t"})
    ctx = tool_context(task, 4)
    assert (ctx.job_id, ctx.round, ctx.role, ctx.call_index, ctx.metadata) == (
        "job-3",
        4,
        "actor",
        0,
        {"tenant": "t"},
    )
    ctx.metadata["x"] = 1
    assert task.metadata == {"tenant": "t"}  # a copy: a tool cannot change the task


# -- results and outcomes ------------------------------------------------------------------------


def test_record_tools_orders_and_stores_once() -> None:
    memory = InMemoryReasonerMemory()
    stored = DUAL.record_tools(memory, 2, [result(2, "second"), result(1, "first")])
    again = MONO.record_tools(memory, 2, [result(1, "other")])

    assert again == stored
    assert [r.output for r in stored.function_results] == ["first", "second"]
    assert (stored.role, stored.round) == ("tool", 2)
    assert stored.content.index("first") < stored.content.index("second")
    assert stored.content.count("<function_call_result>") == 2
    assert len(memory.get_messages()) == 1


def test_the_answer_is_the_last_actor_reply() -> None:
    memory = InMemoryReasonerMemory(history())
    assert DUAL.answer(memory) == "<action>84</action>"  # no deliverable: the visible text
    memory.add_message(
        ModelMessage(
            role="actor",
            round=2,
            content="<shallow_thinking>x</shallow_thinking><deliverable> 84 </deliverable>",
        )
    )
    assert DUAL.answer(memory) == "84"
    assert DUAL.answer(InMemoryReasonerMemory()) == ""


def test_the_outcome_per_status() -> None:
    messages = history()
    for i, m in enumerate(messages):
        m.usage = Usage(prompt_tokens=i, completion_tokens=1, total_tokens=i + 1, calls=1)
    memory = InMemoryReasonerMemory(messages)
    memory.add_message(ModelMessage(role="thinker", round=2, content="x"))
    memory.add_message(ModelMessage(role="actor", round=2, content="<deliverable>84</deliverable>"))

    completed = DUAL.outcome(memory, "completed")
    assert (completed.status, completed.deliverable, completed.rounds, completed.error) == (
        "completed",
        "84",
        3,
        None,
    )
    assert completed.usage == Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15, calls=5)
    assert completed.usage == total_usage(completed.messages)
    assert len(completed.messages) == 7

    truncated = DUAL.outcome(memory, "truncated")
    assert truncated.deliverable == "" and "max_rounds" in str(truncated.error)

    failed = DUAL.outcome(memory, "failed", error="ModelCallError: down")
    assert (failed.deliverable, failed.error, len(failed.messages)) == ("", "ModelCallError: down", 7)

    empty = DUAL.outcome(InMemoryReasonerMemory(), "failed", error="x")
    assert (empty.rounds, empty.messages) == (0, [])
