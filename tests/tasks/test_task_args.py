"""Every tandem task's arguments are checked strictly before it runs: a forged or malformed
message is one WARNING line naming the task, the argument and the value, and nothing else."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery.exceptions import Ignore

import tandem.tasks.control.decide
import tandem.tasks.control.resume
import tandem.tasks.steps.finalize
import tandem.tasks.steps.intake
import tandem.tasks.steps.model
import tandem.tasks.steps.tools  # noqa: F401
from tandem.tasks.app import app
from tandem.tasks.errors import TaskCallError
from tandem.tasks.task_args import (
    PUBLIC_TASKS,
    SHAPE_VALUES,
    STEP_TASKS,
    InvalidArgument,
    call_shape,
    check_arguments,
)

JOB = "6f1c1a52-2c1e-4c6a-9a43-0d1c6c3b1f00"
INFER = 'kwargs={"spec": {"goal": "...", ...}}'
"""How ``tandem.infer`` is called, as every refusal of a bad call says."""


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
def test_an_intake_under_a_task_id_no_step_would_accept_fails_saying_so(
    task_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No job can have such an id, so the answer overwrites nothing: it is given without a look
    at the job store."""
    import tandem.tasks.runtime as runtime
    import tandem.tasks.steps.intake as intake

    def no_runtime() -> None:
        raise AssertionError("a refused intake must not reach the job store")

    monkeypatch.setattr(runtime, "get_runtime", no_runtime)
    monkeypatch.setattr(intake, "get_runtime", no_runtime)
    result = app.tasks["tandem.infer"].apply(kwargs={"spec": {"goal": "g"}}, task_id=task_id)
    assert result.state == "FAILURE"
    assert isinstance(result.result, TaskCallError)
    assert "tandem.infer: argument 'task id'" in str(result.result)
    assert "leave task_id out" in str(result.result)


# -- the public tasks: keyword arguments only, and every refusal names the call's shape ----------


@pytest.fixture
def job_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A runtime on fakeredis and an in-memory result backend."""
    import fakeredis
    from celery.backends.cache import CacheBackend

    from tandem.broker_config import Settings
    from tandem.tasks import runtime as runtime_module
    from tandem.tasks.runtime import Runtime

    runtime = Runtime(Settings())
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    monkeypatch.setattr(app.tasks["tandem.infer"], "backend", CacheBackend(app=app, backend="memory"))
    yield runtime


def test_every_public_task_has_a_documented_shape_from_its_signature() -> None:
    import tandem.tasks.control.answer
    import tandem.tasks.control.follow_up
    import tandem.tasks.control.messages
    import tandem.tasks.steps.intake  # noqa: F401

    registered = {name for name in app.tasks if name.startswith("tandem.")}
    assert registered >= PUBLIC_TASKS
    assert registered - PUBLIC_TASKS - STEP_TASKS <= {"tandem.webhook"}  # internal, ignore_result
    shapes = {name: call_shape(name, app.tasks[name].run) for name in PUBLIC_TASKS}
    assert shapes["tandem.infer"] == INFER
    assert shapes["tandem.fork"] == (
        'kwargs={"job_id": "<job id>", "round": <int>} (optional: "goal", "max_rounds", "owner")'
    )
    assert shapes["tandem.message"].startswith('kwargs={"job_id": "<job id>", "text": "<text>"}')
    for name in PUBLIC_TASKS:  # every argument shown by what it takes, none as "..."
        for param in inspect.signature(app.tasks[name].run).parameters:
            assert param in SHAPE_VALUES, (name, param)


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        pytest.param(
            [{"goal": "g"}],
            {},
            f"tandem.infer takes keyword arguments only, {INFER}: got args=[{{'goal': 'g'}}]",
            id="positional-spec",
        ),
        pytest.param(
            [1, 2, 3],
            {},
            f"tandem.infer takes keyword arguments only, {INFER}: got args=[1, 2, 3]",
            id="positional",
        ),
        pytest.param(
            [],
            {},
            f"tandem.infer takes {INFER}: got kwargs={{}} (missing 'spec')",
            id="nothing",
        ),
        pytest.param(
            [],
            {"spec": {"goal": "g"}, "priority": 3},
            f"tandem.infer takes {INFER}: got kwargs={{'spec': {{'goal': 'g'}}, 'priority': 3}} "
            "(unknown 'priority')",
            id="unknown",
        ),
        pytest.param(
            [],
            {"goal": "g"},
            f"tandem.infer takes {INFER}: got kwargs={{'goal': 'g'}} (unknown 'goal'; missing 'spec')",
            id="spec-fields-as-kwargs",
        ),
    ],
)
def test_a_bad_intake_fails_naming_what_came_and_the_call(
    job_store: Any, args: list[Any], kwargs: dict[str, Any], says: str
) -> None:
    result = app.tasks["tandem.infer"].apply(args=args, kwargs=kwargs, task_id=JOB)
    assert result.state == "FAILURE"
    assert isinstance(result.result, TaskCallError) and isinstance(result.result, TypeError)
    assert str(result.result) == says
    assert job_store.machine.record(JOB) == {}  # nothing was started


def test_a_bad_intake_under_a_real_jobs_id_answers_nothing(job_store: Any) -> None:
    """A forged or mistaken copy under the id of a job that exists (even one only queued by
    ``submit``), or whose result is stored, must not become that job's result: it is only logged."""
    infer = app.tasks["tandem.infer"]
    job_store.store.mark_queued(JOB)
    assert infer.apply(args=[1], task_id=JOB).state == "IGNORED"
    ended = str(uuid.uuid4())
    infer.backend.store_result(ended, {"job_id": ended, "status": "completed"}, "SUCCESS")
    assert infer.apply(args=[1], task_id=ended).state == "IGNORED"
    assert infer.backend.get_task_meta(ended)["result"]["status"] == "completed"


@pytest.mark.parametrize("spec", ["What is 2 + 2?", [1, 2], None])
def test_an_intake_whose_spec_is_not_an_object_is_refused_naming_the_call(job_store: Any, spec: Any) -> None:
    """The spec's type is the spec's problem: a failed ``JobResult`` like any refused spec."""
    infer, job_id = app.tasks["tandem.infer"], str(uuid.uuid4())  # the memory backend is shared
    answer = infer.apply(kwargs={"spec": spec}, task_id=job_id).result
    assert answer["status"] == "failed"
    assert answer["error"].startswith('tandem.infer takes kwargs={"spec": {"goal": "...", ...}}: ')
    assert "a job spec must be a JSON object" in answer["error"]
    assert infer.backend.get_task_meta(job_id)["result"] == answer


def test_a_refused_spec_under_a_started_jobs_id_is_not_its_answer(job_store: Any) -> None:
    infer, job_id = app.tasks["tandem.infer"], str(uuid.uuid4())
    infer.apply(kwargs={"spec": {"goal": "g"}}, task_id=job_id, ignore_result=True)  # the job starts
    assert job_store.store.spec(job_id) is not None
    assert infer.apply(kwargs={"spec": {"goal": ""}}, task_id=job_id).state == "IGNORED"
    assert infer.backend.get_task_meta(job_id)["status"] == "PENDING"


@pytest.mark.parametrize(
    ("task", "args", "kwargs", "says"),
    [
        ("tandem.resume", [JOB], {}, 'tandem.resume takes keyword arguments only, kwargs={"job_id"'),
        ("tandem.fork", [], {"job_id": JOB}, "(missing 'round')"),
        ("tandem.decide", [], {"job_id": JOB, "decisions": [], "yes": 1}, "(unknown 'yes')"),
        ("tandem.answer", [], {}, "(missing 'job_id')"),
        ("tandem.message", [], {"job_id": JOB, "text": 5}, "argument 'text' = 5: must be a string"),
        ("tandem.follow_up", [JOB, "again"], {}, "tandem.follow_up takes keyword arguments only"),
    ],
)
def test_a_bad_control_message_answers_not_accepted_with_the_call(
    task: str, args: list[Any], kwargs: dict[str, Any], says: str
) -> None:
    answer = app.tasks[task].apply(args=args, kwargs=kwargs).result
    assert answer["accepted"] is False and answer["reason"] == "invalid"
    assert says in answer["error"]
    assert f"{task} takes kwargs={{" in answer["error"] or "keyword arguments only" in answer["error"]
    assert answer["job_id"] == (JOB if kwargs.get("job_id") == JOB or args[:1] == [JOB] else None)


@pytest.mark.parametrize(
    ("task", "kwargs", "name", "says"),
    [
        ("tandem.message", {"text": "hi", "idempotency_key": ["k"]}, "idempotency_key", "a string or null"),
        ("tandem.answer", {"pause_id": 7}, "pause_id", "must be a string or null, not an int"),
        ("tandem.decide", {"decisions": 42}, "decisions", "a list of objects or a boolean"),
        ("tandem.decide", {"decisions": "yes"}, "decisions", "not a str"),
        ("tandem.decide", {"decisions": [1, 2]}, "decisions", "a list of objects"),
        ("tandem.follow_up", {"goal": None}, "goal", "must be a string, not null"),
        ("tandem.follow_up", {"goal": ["next"]}, "goal", "must be a string"),
        ("tandem.fork", {"round": 1, "goal": 5}, "goal", "must be a string"),
    ],
)
def test_a_control_message_of_a_wrong_type_is_refused_before_it_acts(
    task: str, kwargs: dict[str, Any], name: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every keyword's type is its annotation in the task's signature, checked in one place."""
    import tandem.tasks.control.answer
    import tandem.tasks.control.follow_up
    import tandem.tasks.control.messages  # noqa: F401
    import tandem.tasks.runtime as runtime

    def no_runtime() -> None:
        raise AssertionError("a refused message must not reach the job's state")

    monkeypatch.setattr(runtime, "get_runtime", no_runtime)
    answer = app.tasks[task].apply(kwargs={"job_id": JOB, **kwargs}).result
    assert (answer["accepted"], answer["reason"], answer["job_id"]) == (False, "invalid", JOB)
    assert f"{task}: argument {name!r}" in answer["error"] and says in answer["error"]
    assert f"{task} takes kwargs={{" in answer["error"]


@pytest.mark.parametrize("decisions", [True, False, [], [{"index": 1, "approve": True}]])
def test_every_documented_form_of_decisions_passes_the_type_check(decisions: Any) -> None:
    check_arguments(
        "tandem.decide",
        app.tasks["tandem.decide"].run,
        (),
        {"job_id": JOB, "decisions": decisions},
        keywords_only=True,
    )


def _as_a_worker_runs(task: Any, task_id: str, **kwargs: Any) -> Any:
    """Run ``task`` as a worker does for a message with id ``task_id`` (not eagerly)."""
    task.push_request(id=task_id, is_eager=False, called_directly=False)
    try:
        return task(**kwargs)
    finally:
        task.pop_request()


def test_a_control_message_under_a_jobs_id_is_only_logged(
    job_store: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its answer would become the job's Celery result while the job runs: it does nothing."""
    resume = app.tasks["tandem.resume"]
    monkeypatch.setattr(resume, "backend", app.tasks["tandem.infer"].backend)
    job_store.store.mark_queued(JOB)
    with caplog.at_level(logging.WARNING, "tandem.tasks"), pytest.raises(Ignore):
        _as_a_worker_runs(resume, JOB)
    assert "only logged" in caplog.text
    answered = str(uuid.uuid4())  # an id that has an answer already: the first one stands
    resume.backend.store_result(answered, {"accepted": False, "reason": "unknown"}, "SUCCESS")
    with pytest.raises(Ignore):
        _as_a_worker_runs(resume, answered, job_id=JOB)
    fresh = _as_a_worker_runs(resume, str(uuid.uuid4()))  # an id that names nothing is answered
    assert (fresh["accepted"], fresh["reason"]) == (False, "invalid")


# -- messages a worker drops unread: answered under their id when it names no job ----------------


def test_a_dropped_public_message_is_answered_with_the_calls_shape(
    job_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.tasks.call_answers import answer_dropped

    backend = app.tasks["tandem.infer"].backend
    monkeypatch.setattr(app.tasks["tandem.fork"], "backend", backend)
    infer_id, fork_id = str(uuid.uuid4()), str(uuid.uuid4())
    answer_dropped(app, {"task": "tandem.infer", "id": infer_id}, "its kwargs are null, not an object")
    answer_dropped(app, {"task": "tandem.fork", "id": fork_id}, "a body that cannot be decoded")
    failed = backend.get_task_meta(infer_id)
    assert failed["status"] == "FAILURE" and isinstance(failed["result"], TaskCallError)
    assert str(failed["result"]) == (
        f"tandem.infer takes {INFER}: the message could not be read (its kwargs are null, not an "
        "object); nothing was done"
    )
    refused = backend.get_task_meta(fork_id)["result"]
    assert (refused["job_id"], refused["accepted"], refused["reason"]) == (None, False, "invalid")
    assert refused["error"].startswith('tandem.fork takes kwargs={"job_id": "<job id>", "round": <int>}')


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"task": "tandem.infer", "id": "<queued job>"}, id="a-jobs-id"),
        pytest.param({"task": "tandem.infer", "id": "x" * 2000}, id="an-id-too-long"),
        pytest.param({"task": "tandem.infer", "id": 7}, id="an-id-not-a-string"),
        pytest.param({"task": "tandem.infer", "id": "n-1", "ignore_result": True}, id="no-result-asked"),
        pytest.param({"task": "tandem.run_tool", "id": "n-2"}, id="an-internal-step"),
        pytest.param({"task": "celery.ping", "id": "n-3"}, id="not-tandems"),
        pytest.param({}, id="no-headers"),
    ],
)
def test_a_dropped_message_is_not_answered_where_no_answer_belongs(
    job_store: Any, headers: dict[str, Any]
) -> None:
    from tandem.tasks.call_answers import answer_dropped

    backend = app.tasks["tandem.infer"].backend
    if headers.get("id") == "<queued job>":  # submitted, not yet taken: it has no result yet
        headers = {**headers, "id": str(uuid.uuid4())}
        job_store.store.mark_queued(headers["id"])
    answer_dropped(app, headers, "a body that cannot be decoded")
    task_id = headers.get("id")
    if isinstance(task_id, str):
        assert backend.get_task_meta(task_id)["status"] == "PENDING"


def test_with_message_signing_a_dropped_message_is_never_answered(
    job_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signing does not cover a message's headers: one the worker could not read is not trusted."""
    from tandem.tasks.call_answers import answer_dropped

    monkeypatch.setitem(app.conf, "accept_content", ["auth"])
    task_id = str(uuid.uuid4())
    answer_dropped(app, {"task": "tandem.infer", "id": task_id}, "content disallowed")
    assert app.tasks["tandem.infer"].backend.get_task_meta(task_id)["status"] == "PENDING"
