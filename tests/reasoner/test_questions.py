"""Questions in process: ``ToolCallContext.ask`` and the built-in ``ask_person`` answered by the
reasoner's ``ask`` callback (sync or async), checked against the schema, failing clearly without
a callback or an answer in time."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from tandem.reasoner import MonoModelReasoner, ReActReasoner, ScriptedModelService, Task
from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, NativeToolCall
from tandem.reasoner.questions import ASK_PERSON, check_answer
from tandem.toolkit import NoAnswer, Question, QuestionError, ToolCallContext, tool

COLOUR = {"type": "string", "enum": ["teal", "amber"]}


def ask_call(question: str, schema: dict[str, Any] | None = None) -> str:
    args: dict[str, Any] = {"question": question}
    if schema is not None:
        args["answer_schema"] = schema
    block = json.dumps({"name": ASK_PERSON, "call_objective": "ask", "args": args})
    return f"<action><function_call>{block}</function_call></action>"


def first_result(model: ScriptedModelService, task: Task, **reasoner: Any) -> FunctionCallResult:
    outcome = MonoModelReasoner(model, **reasoner).run(task)
    assert outcome.status == "completed", outcome.error
    return outcome.messages[1].function_results[0]


def scripted(*replies: str) -> ScriptedModelService:
    return ScriptedModelService([*replies, "TASK_DONE <deliverable>done</deliverable>"])


def test_ask_person_returns_the_callbacks_answer_and_the_model_reads_it() -> None:
    asked: list[Question] = []

    def ask(question: Question) -> Any:
        asked.append(question)
        return "teal"

    model = scripted(ask_call("Which colour?", COLOUR))
    result = first_result(model, Task(goal="paint", ask_person=True), ask=ask)
    assert (result.status.value, result.output) == ("succeeded", "teal")
    assert (asked[0].text, asked[0].answer_schema, asked[0].round, asked[0].call_index) == (
        "Which colour?",
        COLOUR,
        0,
        1,
    )
    assert "teal" in str(model.calls[1]["messages"])  # the next turn shows the answer


def test_ask_person_is_offered_only_when_the_task_asks_for_it() -> None:
    assert ASK_PERSON not in [t.name for t in Task(goal="g").recommend()[0]]
    offered = Task(goal="g", ask_person=True, allowed_tools=[], answer_timeout_s=5).recommend()[0]
    assert [t.name for t in offered] == [ASK_PERSON] and offered[0].timeout == 35
    with pytest.raises(ConfigurationError, match="answer_timeout_s must be a positive number"):
        Task(goal="g", answer_timeout_s=0)


@pytest.mark.parametrize(
    ("ask", "timeout", "said"),
    [
        pytest.param(None, None, "QuestionError: no person can be asked here", id="no-callback"),
        pytest.param(
            lambda q: "mauve",
            None,
            "does not fit its schema: field '(the answer)': 'mauve' is not one of",
            id="unfitting",
        ),
        pytest.param(
            lambda q: threading.Event().wait(5), 0.2, "NoAnswer: no answer within 0.2 s", id="timeout"
        ),
        pytest.param(
            lambda q: 1 / 0, None, "the ask callback failed: ZeroDivisionError", id="callback-fails"
        ),
    ],
)
def test_a_question_without_a_usable_answer_fails_clearly_to_the_model(
    ask: Any, timeout: float | None, said: str
) -> None:
    model = scripted(ask_call("Which colour?", COLOUR))
    result = first_result(model, Task(goal="paint", ask_person=True, answer_timeout_s=timeout), ask=ask)
    assert result.status.value == "failed" and said in result.output


def test_a_tool_asks_through_its_context_and_may_catch_no_answer() -> None:
    @tool
    def book(ctx: ToolCallContext) -> str:
        """Book a trip."""
        try:
            city = ctx.ask("Which city?", {"type": "object", "required": ["city"]})["city"]
            day = ctx.ask("Which day?")
        except NoAnswer:
            return "booked nothing"
        return f"booked {city} on {day}"

    answers = iter([{"city": "Oslo"}, "Monday"])
    seqs: list[int] = []

    def ask(question: Question) -> Any:
        seqs.append(question.seq)
        return next(answers)

    call = (
        '<action><function_call>{"name": "book", "call_objective": "go", "args": {}}</function_call></action>'
    )
    assert (
        first_result(scripted(call), Task(goal="trip", tools=[book]), ask=ask).output
        == "booked Oslo on Monday"
    )
    assert seqs == [1, 2]
    late = first_result(
        scripted(call),
        Task(goal="trip", tools=[book], answer_timeout_s=0.1),
        ask=lambda q: threading.Event().wait(3),
    )
    assert late.output == "booked nothing"


def test_an_async_callback_answers_a_react_run_with_native_calls() -> None:
    async def ask(question: Question) -> Any:
        await asyncio.sleep(0)
        return {"n": 3}

    call = NativeToolCall(
        id="c1",
        name=ASK_PERSON,
        arguments=json.dumps({"question": "How many?", "answer_schema": {"type": "object"}}),
    )
    model = ScriptedModelService([ModelMessage(role="actor", content="", tool_calls=[call]), "3 it is"])
    outcome = asyncio.run(ReActReasoner(model, ask=ask).arun(Task(goal="count", ask_person=True)))
    assert outcome.status == "completed", outcome.error
    assert '{"n": 3}' in str(model.calls[1]["messages"])


@pytest.mark.parametrize(
    ("question", "schema", "said"),
    [
        pytest.param("", None, "the question must be text", id="empty"),
        pytest.param("Q?", {"type": "strin"}, "not a valid JSON schema", id="bad-schema"),
        pytest.param("Q?", ["type"], "must be a JSON schema object", id="schema-not-object"),
    ],
)
def test_a_malformed_question_is_refused(question: str, schema: Any, said: str) -> None:
    ctx = ToolCallContext().bind_asker(lambda q: "never asked")
    with pytest.raises(QuestionError, match=said):
        ctx.ask(question, schema)


def test_answers_must_be_json_values() -> None:
    assert check_answer({"a": [1, None]}, None) == {"a": [1, None]}
    with pytest.raises(QuestionError, match="must be a JSON value"):
        check_answer(float("nan"), None)
