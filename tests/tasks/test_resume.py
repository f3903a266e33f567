"""``resume_job`` and ``fork_job`` over a runtime on fakeredis: where a job goes on, what is sent,
and every refusal (nothing changes then). The runs with real workers are in
``tests/integration/test_resume.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.tasks import runtime as runtime_module
from tandem.tasks.control import resume as resume_module
from tandem.tasks.control.resume import fork_job, resume_job
from tandem.tasks.errors import ResumeRefused
from tandem.tasks.runtime import Runtime
from tandem.tasks.spec import JobSpec
from tandem.tasks.steps import dispatch
from tandem.tasks.steps.tools import CANCELLED_CALL

JOB = "job-9"
CALL = '<function_call>{"name": "calculate", "args": {"expression": "%s"}}</function_call>'
CALLS = "<action>" + CALL % "1+2" + "\n" + CALL % "3*4" + "</action>"
DONE = "<deliverable>42</deliverable>"

Sent = list[tuple[str, list[Any]]]


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = Runtime(Settings(lease_seconds=2.0, stall_seconds=60.0, memory_ttl=600))
    runtime.__dict__["redis"] = fakeredis.FakeRedis()
    monkeypatch.setattr(runtime_module, "_runtime", runtime)
    yield runtime


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    messages: Sent = []
    monkeypatch.setattr(
        dispatch.app, "send_task", lambda name, args, **kw: messages.append((name, list(args)))
    )
    monkeypatch.setattr(resume_module.app.backend, "forget", lambda job_id: None)
    return messages


def msg(round_no: int, role: str, content: str = "<instruction>go</instruction>") -> ModelMessage:
    return ModelMessage(role=role, round=round_no, content=content)  # type: ignore[arg-type]


def result(index: int, output: str = "3") -> FunctionCallResult:
    status = FunctionCallStatus.FAILED if output == CANCELLED_CALL else FunctionCallStatus.SUCCEEDED
    return FunctionCallResult(index=index, name="calculate", status=status, output=output)


def tool_msg(round_no: int) -> ModelMessage:
    return ModelMessage(role="tool", round=round_no, content="r", function_results=[result(1), result(2)])


def stored_job(
    rt: Runtime, status: str | None, messages: list[ModelMessage], job_id: str = JOB, **spec: Any
) -> None:
    """A job that stored ``messages`` and ended with ``status`` (``None``: still running)."""
    job_spec = JobSpec(goal="the goal", **spec)
    assert rt.machine.create(
        job_id, job_spec.model_dump_json(), "dual", (0, "thinker"), [], timeout=60, ttl_after=600
    )
    memory = rt.store.memory(job_id)
    for m in messages:
        memory.add_message(m)
    if status is not None:
        assert rt.machine.finish(job_id, f'{{"job_id": "{job_id}", "status": "{status}"}}', status, "", 60)


def one_round(deliver: bool = False) -> list[ModelMessage]:
    return [msg(0, "thinker"), msg(0, "actor", DONE if deliver else CALLS), tool_msg(0)]


def test_a_failed_job_goes_on_at_its_first_step_with_nothing_stored(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "failed", one_round())
    answer = resume_job(rt, JOB)
    assert answer["accepted"]
    assert (answer["round"], answer["step"], answer["max_rounds"]) == (1, "thinker", 20)
    assert sent == [("tandem.thinker_turn", [JOB, 1])]
    assert rt.store.status(JOB).state == "running"  # type: ignore[union-attr]
    assert rt.store.result(JOB) is None
    started = [e for e in rt.store.read_events(JOB) if e.type == "job_started"][-1]
    assert started.data["resumed"] is True and (started.data["round"], started.data["step"]) == (1, "thinker")


def test_a_second_resume_is_refused_while_the_first_runs(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "failed", one_round())
    resume_job(rt, JOB)
    with pytest.raises(ResumeRefused, match=r"job 'job-9' is running, not ended") as refused:
        resume_job(rt, JOB)
    assert refused.value.reason == "state"
    assert len(sent) == 1


@pytest.mark.parametrize(
    ("status", "match", "reason"),
    [
        pytest.param(None, "is running, not ended: only an ended job can be resumed", "state", id="running"),
        pytest.param("completed", "nothing to resume .* fork it", "state", id="completed"),
    ],
)
def test_running_and_completed_jobs_are_refused(
    rt: Runtime, sent: Sent, status: str | None, match: str, reason: str
) -> None:
    stored_job(rt, status, one_round(deliver=True))
    with pytest.raises(ResumeRefused, match=match) as refused:
        resume_job(rt, JOB)
    assert refused.value.reason == reason and sent == []


def test_unknown_and_expired_jobs_are_refused(rt: Runtime, sent: Sent) -> None:
    unknown = r"^no job 'nope' is known \(never submitted, or its records expired\)$"
    with pytest.raises(ResumeRefused, match=unknown) as refused:
        resume_job(rt, "nope")
    assert refused.value.reason == "unknown"
    stored_job(rt, "failed", one_round())
    rt.redis.delete(rt.store.key(JOB, "spec"))  # its keys expire one by one
    with pytest.raises(ResumeRefused, match=unknown.replace("nope", JOB)) as refused:
        resume_job(rt, JOB)
    assert refused.value.reason == "unknown"
    with pytest.raises(ResumeRefused, match=r"^no job 7 is known") as refused:
        resume_job(rt, 7)
    assert refused.value.reason == "unknown"


def test_a_job_cancelled_while_queued_has_nothing_to_resume(rt: Runtime, sent: Sent) -> None:
    rt.store.mark_queued(JOB)
    rt.machine.finish(JOB, f'{{"job_id": "{JOB}", "status": "cancelled"}}', "cancelled", "", 60)
    with pytest.raises(ResumeRefused, match="ended \\(cancelled\\) before a worker started it") as refused:
        resume_job(rt, JOB)
    assert refused.value.reason == "state" and sent == []


def test_a_truncated_job_goes_on_only_with_a_raised_budget(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "truncated", [msg(0, "thinker"), msg(0, "actor", CALLS)], max_rounds=1)
    with pytest.raises(ResumeRefused, match=r"would end truncated again.*max_rounds above 1"):
        resume_job(rt, JOB)
    for bad in (1, 0, True, "3"):
        with pytest.raises(ResumeRefused, match=r"max_rounds=.*has used 1 round\(s\) already"):
            resume_job(rt, JOB, bad)
    with pytest.raises(ResumeRefused, match="max_rounds"):
        resume_job(rt, JOB, 100000)  # over JobSpec's limit
    assert sent == [] and rt.store.status(JOB).state == "truncated"  # type: ignore[union-attr]
    answer = resume_job(rt, JOB, 3)
    assert (answer["step"], answer["max_rounds"]) == ("tools", 3)
    assert rt.store.spec(JOB).max_rounds == 3  # type: ignore[union-attr]
    # The calls the last round asked for (and never ran, the budget being spent) run now.
    assert sent == [("tandem.run_tool", [JOB, 0, 1]), ("tandem.run_tool", [JOB, 0, 2])]


def test_a_cancelled_tool_step_runs_only_the_calls_that_never_ran(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "cancelled", [msg(0, "thinker"), msg(0, "actor", CALLS)])
    tools = rt.store.key(JOB, "tools")
    rt.redis.hset(tools, "0:1", result(1).model_dump_json())
    rt.redis.hset(tools, "0:2", result(2, CANCELLED_CALL).model_dump_json())
    answer = resume_job(rt, JOB)
    assert answer["step"] == "tools" and sent == [("tandem.run_tool", [JOB, 0, 2])]
    assert rt.store.tool_result(JOB, 0, 1) == result(1) and rt.store.tool_result(JOB, 0, 2) is None
    assert rt.machine.record(JOB)["pending"] == "1"
    assert not rt.store.cancel_requested(JOB)


def test_every_call_stored_resumes_at_collect(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "failed", [msg(0, "thinker"), msg(0, "actor", CALLS)])
    for i in (1, 2):
        rt.redis.hset(rt.store.key(JOB, "tools"), f"0:{i}", result(i).model_dump_json())
    assert resume_job(rt, JOB)["step"] == "collect"
    assert sent == [("tandem.collect_tools", [JOB, 0])]
    assert rt.machine.record(JOB)["calls"] == "2"


def three_rounds() -> list[ModelMessage]:
    return [
        *one_round(),
        msg(1, "thinker"),
        msg(1, "actor", CALLS),
        tool_msg(1),
        msg(2, "thinker"),
        msg(2, "actor", DONE),
    ]


def test_a_fork_copies_the_first_rounds_into_a_new_job(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "completed", three_rounds())
    before = rt.redis.hgetall(rt.store.key(JOB, "memory"))
    answer = fork_job(rt, JOB, 1, "another goal", fork_id="fork-1")
    assert answer == {
        "job_id": JOB, "accepted": True, "fork_id": "fork-1", "round": 1, "step": "thinker", "max_rounds": 20,
    }  # fmt: skip
    assert sent == [("tandem.thinker_turn", ["fork-1", 1])]
    copied = rt.store.memory("fork-1").get_messages()
    assert [m.key for m in copied] == ["0:thinker", "0:actor", "0:tool"]
    assert rt.store.spec("fork-1").goal == "another goal"  # type: ignore[union-attr]
    started = rt.store.read_events("fork-1")[0]
    assert started.type == "job_started"
    assert (started.data["forked_from"], started.data["forked_round"]) == (JOB, 1)
    # The source is untouched; the same fork again (a redelivered task) finds the first one.
    assert rt.redis.hgetall(rt.store.key(JOB, "memory")) == before
    assert rt.store.status(JOB).state == "completed"  # type: ignore[union-attr]
    assert fork_job(rt, JOB, 1, "another goal", fork_id="fork-1")["fork_id"] == "fork-1"
    assert len(sent) == 1


@pytest.mark.parametrize("round_no", [0, 4, -1, "1", None])
def test_a_fork_round_outside_the_stored_rounds_is_refused(rt: Runtime, sent: Sent, round_no: Any) -> None:
    stored_job(rt, "completed", three_rounds())
    outside = r"outside the stored rounds of job 'job-9' \(0..2\).*from 1 to 3"
    with pytest.raises(ResumeRefused, match=outside):
        fork_job(rt, JOB, round_no)
    assert sent == []


def test_a_running_job_is_not_forked(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, None, one_round())
    with pytest.raises(ResumeRefused, match="is running, not ended: only an ended job can be forked"):
        fork_job(rt, JOB, 1)


def test_a_resumed_jobs_stream_goes_on_after_its_first_final(rt: Runtime, sent: Sent) -> None:
    stored_job(rt, "failed", one_round())  # the end writes its ``final`` event
    resume_job(rt, JOB)
    rt.store.publish(JOB, "model_reply", {"round": 1, "role": "thinker", "content": "again"})
    rt.machine.finish(JOB, f'{{"job_id": "{JOB}", "status": "completed"}}', "completed", "", 60)
    kinds = [(e.type, e.data.get("status")) for e in rt.store.events(JOB, timeout=10)]
    assert kinds == [
        ("final", "failed"), ("job_started", None), ("model_reply", None), ("final", "completed"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("following", "state", "ends"),
    [
        pytest.param([], b"failed", True, id="the-end"),
        pytest.param([], None, True, id="expired"),
        pytest.param([], b"running", False, id="reopened-not-announced-yet"),
        pytest.param(["tool_result", "job_started"], b"running", False, id="resumed"),
        pytest.param(["round_started"], b"completed", True, id="a-straggler-after-the-end"),
    ],
)
def test_when_a_final_event_ends_the_stream(following: list[str], state: bytes | None, ends: bool) -> None:
    from tandem.tasks.state.store import final_ends

    assert final_ends(following, state) is ends


def test_result_never_takes_celerys_old_result_for_a_running_job(rt: Runtime) -> None:
    from celery import Celery

    from tandem.client.handle import JobHandle
    from tandem.tasks.errors import JobTimeout

    app = Celery("test-resume", broker="memory://", backend="cache+memory://")
    stored_job(rt, None, one_round())  # running again (as after a resume)
    app.backend.store_result(JOB, {"job_id": JOB, "status": "failed", "error": "the first run"}, "SUCCESS")
    handle = JobHandle(JOB, rt.store, app)
    with pytest.raises(JobTimeout, match="state: running"):
        handle.result(timeout=0.2)
    rt.machine.finish(JOB, f'{{"job_id": "{JOB}", "status": "completed"}}', "completed", "", 60)
    assert handle.result(timeout=1).status == "completed"
    # A job the store does not know (refused at intake) is still answered from Celery's result.
    app.backend.store_result("refused", {"job_id": "refused", "status": "failed", "error": "bad"}, "SUCCESS")
    assert JobHandle("refused", rt.store, app).result(timeout=1).error == "bad"
