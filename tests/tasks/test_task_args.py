"""Every tandem task's arguments are checked strictly before it runs: a forged or malformed
message is one WARNING line naming the task, the argument and the value, and nothing else."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from celery.exceptions import Ignore

import tandem.tasks.control.decide
import tandem.tasks.control.resume
import tandem.tasks.steps.finalize
import tandem.tasks.steps.model
import tandem.tasks.steps.tools  # noqa: F401
from tandem.tasks.app import app
from tandem.tasks.task_args import InvalidArgument, check_arguments

JOB = "6f1c1a52-2c1e-4c6a-9a43-0d1c6c3b1f00"


def run_tool(job_id: str, round_no: int, index: int, *_: Any) -> None:
    """A stand-in with ``tandem.run_tool``'s signature."""


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        pytest.param((JOB, 0, 1.0), {}, "index", id="float-for-int"),
        pytest.param((JOB, 0, "2"), {}, "index", id="str-for-int"),
        pytest.param((JOB, 0, True), {}, "index", id="bool-for-int"),
        pytest.param((JOB, 0, 0), {}, "index", id="index-below-1"),
        pytest.param((JOB, 0, 10_001), {}, "index", id="index-too-high"),
        pytest.param((JOB, -1, 1), {}, "round_no", id="negative-round"),
        pytest.param((JOB, 1.5, 1), {}, "round_no", id="float-round"),
        pytest.param((JOB, None, 1), {}, "round_no", id="none-round"),
        pytest.param((7, 0, 1), {}, "job_id", id="int-job-id"),
        pytest.param(("", 0, 1), {}, "job_id", id="empty-job-id"),
        pytest.param(("a}b", 0, 1), {}, "job_id", id="brace-in-job-id"),
        pytest.param(("a b", 0, 1), {}, "job_id", id="space-in-job-id"),
        pytest.param(("x" * 257, 0, 1), {}, "job_id", id="job-id-too-long"),
        pytest.param((JOB, 0), {}, "arguments", id="missing-index"),
        pytest.param((JOB, 0, 1), {"nonsense": 1}, "arguments", id="unknown-kwarg"),
        pytest.param((JOB,), {"round_no": "0", "index": 1}, "round_no", id="kwarg-checked-too"),
    ],
)
def test_a_wrong_argument_is_refused_naming_it(
    args: tuple[Any, ...], kwargs: dict[str, Any], name: str
) -> None:
    with pytest.raises(InvalidArgument) as refused:
        check_arguments("tandem.run_tool", run_tool, args, kwargs)
    assert refused.value.name == name
    assert f"tandem.run_tool: argument {name!r}" in str(refused.value)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        pytest.param((JOB, 0, 1), {}, id="plain"),
        pytest.param((JOB, 3, 2, "old-extra"), {}, id="extra-positional-of-old-messages"),
        pytest.param((), {"job_id": JOB, "round_no": 0, "index": 10_000}, id="by-keyword"),
    ],
)
def test_right_arguments_pass(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    check_arguments("tandem.run_tool", run_tool, args, kwargs)


@pytest.mark.parametrize(
    ("task", "args"),
    [
        ("tandem.run_tool", (JOB, 0, 1.0)),
        ("tandem.run_tool", (JOB, 0, "2")),
        ("tandem.thinker_turn", (JOB, "0")),
        ("tandem.actor_turn", (JOB, 0.0)),
        ("tandem.react_turn", ([JOB], 0)),
        ("tandem.collect_tools", (None, None)),
        ("tandem.finalize", (JOB,)),
    ],
)
def test_a_refused_step_is_ignored_with_one_warning_and_reads_nothing(
    task: str, args: tuple[Any, ...], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tandem.tasks.runtime as runtime

    def no_runtime() -> None:
        raise AssertionError("a refused message must not reach the job's state")

    import tandem.tasks.steps.guard as guard
    import tandem.tasks.steps.model as model
    import tandem.tasks.steps.tools as tools

    for module in (runtime, guard, model, tools):
        monkeypatch.setattr(module, "get_runtime", no_runtime)
    with caplog.at_level(logging.WARNING, "tandem.tasks"), pytest.raises(Ignore):
        app.tasks[task](*args)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert task in warnings[0].getMessage() and "argument" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "name"),
    [
        ("tandem.resume", (JOB,), {"max_rounds": 2.0}, "max_rounds"),
        ("tandem.fork", (JOB, "1"), {}, "round"),
        ("tandem.fork", (JOB, 1), {"goal": {"x": 1}}, "goal"),
        ("tandem.decide", (), {"job_id": ["x"], "decisions": []}, "job_id"),
        ("tandem.fork", (JOB, 1), {"owner": "team a"}, "owner"),
        ("tandem.resume", (JOB,), {"owner": 7}, "owner"),
        ("tandem.decide", (), {"job_id": JOB, "decisions": [], "owner": ""}, "owner"),
    ],
)
def test_a_refused_control_message_answers_not_accepted(
    task: str, args: tuple[Any, ...], kwargs: dict[str, Any], name: str
) -> None:
    answer = app.tasks[task](*args, **kwargs)
    assert answer["accepted"] is False and answer["reason"] == "invalid"
    assert f"argument {name!r}" in answer["error"]


def test_a_secret_in_a_refused_value_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "tandem.tasks"), pytest.raises(Ignore):
        app.tasks["tandem.run_tool"](JOB, 0, "api_key=sk-live-0123456789abcdef")
    assert "sk-live-0123456789abcdef" not in caplog.text


@pytest.mark.parametrize("task_id", ["a b", "x{y}", "z" * 300])
def test_an_intake_under_a_task_id_no_step_would_accept_is_ignored(
    task_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tandem.tasks.runtime as runtime
    import tandem.tasks.steps.intake as intake

    def no_runtime() -> None:
        raise AssertionError("a refused intake must not reach the job store")

    monkeypatch.setattr(runtime, "get_runtime", no_runtime)
    monkeypatch.setattr(intake, "get_runtime", no_runtime)
    result = app.tasks["tandem.infer"].apply(kwargs={"spec": {"goal": "g"}}, task_id=task_id)
    assert result.state == "IGNORED"
