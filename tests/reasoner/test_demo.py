"""The offline demo: its tools, and its rule-following models through the real reasoners."""

from __future__ import annotations

import pytest

from tandem.reasoner import DualModelReasoner, MonoModelReasoner, Task
from tandem.reasoner.demo import DEMO_GOAL, DEMO_MODEL_NAME, calculate, demo_model, demo_tools, word_count
from tandem.reasoner.messages import FunctionCallStatus
from tandem.reasoner.task import ReasonerOutcome

CONFIGURE = "configure a real model"


def run_dual(goal: str) -> ReasonerOutcome:
    return DualModelReasoner(demo_model("thinker"), demo_model("actor")).run(
        Task(goal=goal, tools=demo_tools())
    )


def run_mono(goal: str) -> ReasonerOutcome:
    return MonoModelReasoner(demo_model("mono")).run(Task(goal=goal, tools=demo_tools()))


RUNS = [pytest.param(run_dual, id="dual"), pytest.param(run_mono, id="mono")]


@pytest.mark.parametrize("run", RUNS)
def test_the_demo_goal_completes_with_the_right_numbers(run: object) -> None:
    outcome = run(DEMO_GOAL)  # type: ignore[operator]
    assert outcome.status == "completed", outcome.error
    assert "'tandem runs reasoning jobs on celery workers' has 7 words" in outcome.deliverable
    assert "7 * 12 = 84" in outcome.deliverable
    results = [r for m in outcome.messages for r in m.function_results]
    assert [(r.name, r.status, r.output) for r in results] == [
        ("word_count", FunctionCallStatus.SUCCEEDED, "7"),
        ("calculate", FunctionCallStatus.SUCCEEDED, "84"),
    ]
    assert {m.model for m in outcome.messages if m.role != "tool"} == {DEMO_MODEL_NAME}


@pytest.mark.parametrize("run", RUNS)
def test_a_bare_expression_is_calculated(run: object) -> None:
    outcome = run("What is (17 * 23) + 4?")  # type: ignore[operator]
    assert outcome.status == "completed"
    assert "(17 * 23) + 4 = 395" in outcome.deliverable


@pytest.mark.parametrize("run", RUNS)
def test_a_goal_it_cannot_handle_says_to_configure_a_real_model(run: object) -> None:
    outcome = run("Write a sonnet about message brokers")  # type: ignore[operator]
    assert outcome.status == "completed"
    assert CONFIGURE in outcome.deliverable
    assert all(not m.function_results for m in outcome.messages)


def test_the_mono_demo_names_the_actor_variable() -> None:
    """Mono jobs use the Actor role's model settings, so that is the variable to set."""
    outcome = run_mono("Write a sonnet")
    assert "TANDEM_ACTOR_MODEL" in outcome.deliverable


def test_demo_model_refuses_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="'thinker', 'actor' or 'mono'"):
        demo_model("judge")


def test_demo_tools() -> None:
    tools = {t.name: t for t in demo_tools()}
    assert set(tools) == {"calculate", "word_count"}
    assert set(tools["calculate"].parameters["properties"]) == {"expression"}
    assert tools["word_count"].description.startswith("Count the words")


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        pytest.param("(17 * 23) + 4", 395, id="parentheses"),
        pytest.param("7 * 12", 84, id="product"),
        pytest.param("7 / 2", 3.5, id="true-division"),
        pytest.param("8 / 2", 4, id="whole-result-is-int"),
        pytest.param("7 // 2", 3, id="floor"),
        pytest.param("-3 ** 2", -9, id="unary"),
        pytest.param("2 ** 10 % 1000", 24, id="power-modulo"),
    ],
)
def test_calculate(expression: str, value: float) -> None:
    result = calculate(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("__import__('os').system('true')", id="call"),
        pytest.param("x + 1", id="name"),
        pytest.param("abs(-1)", id="builtin"),
        pytest.param("(1).real", id="attribute"),
        pytest.param("[1, 2]", id="list"),
        pytest.param("'a' * 3", id="string"),
        pytest.param("1 if 1 else 2", id="conditional"),
        pytest.param("2 ** 100", id="huge-exponent"),
    ],
)
def test_calculate_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError):
        calculate(expression)


def test_word_count() -> None:
    assert word_count("tandem runs reasoning jobs on celery workers") == 7
    assert word_count("  spaced\tout\nwords  ") == 3
    assert word_count("") == 0
