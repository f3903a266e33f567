"""Tool approval: the pure decision rules, and the in-process reasoners, sync and async.

A reply calls ``add`` (free) and ``send_email`` (needs approval). The approver's decisions
decide what runs; every run is checked through what the tools did, what the model read next and
the hooks' events.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner import DualModelReasoner, MonoModelReasoner, ReActReasoner
from tandem.reasoner.approval import (
    Decision,
    PendingCall,
    pending_calls,
    validate_approve_tools,
    validate_decisions,
)
from tandem.reasoner.errors import ApprovalError, ConfigurationError
from tandem.reasoner.function_calling import ParsedFunctionCall
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage, NativeToolCall
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.tool import Tool, tool

FAILED, OK = FunctionCallStatus.FAILED, FunctionCallStatus.SUCCEEDED

# -- tools ------------------------------------------------------------------------------------

outbox: list[dict[str, str]] = []
ran: list[str] = []


@tool(requires_approval=True)
def send_email(to: str, subject: str, body: str = "") -> str:
    """Send an email."""
    outbox.append({"to": to, "subject": subject, "body": body})
    ran.append("send_email")
    return f"sent to {to}"


def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append("add")
    return a + b


def delete_file(path: str) -> str:
    """Delete a file (approval comes from Task.approve_tools)."""
    ran.append("delete_file")
    return f"deleted {path}"


TOOLS = [send_email, Tool.from_function(add), Tool.from_function(delete_file)]


@pytest.fixture(autouse=True)
def _clean() -> None:
    outbox.clear()
    ran.clear()


def fc(name: str, args: dict[str, Any], objective: str = "") -> str:
    payload = {"name": name, "call_objective": objective or f"use {name}", "args": args}
    return f"<function_call>\n{json.dumps(payload)}\n</function_call>"


ROUND_0 = (
    "<shallow_thinking>act</shallow_thinking>\n<action>\n"
    + fc("add", {"a": 2, "b": 3})
    + "\n"
    + fc("send_email", {"to": "bob@example.com", "subject": "Sum"}, objective="tell Bob the sum")
    + "\n</action>"
)
DELIVER = "TASK_DONE\n<deliverable>done</deliverable>"


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        self.events.append(("tool_called", (index, call.name, dict(call.args))))

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        self.events.append(("tool_returned", (result.index, result.status.value)))

    def approval_requested(self, round_no: int, pending: list[PendingCall]) -> None:
        self.events.append(("approval_requested", [p.model_dump() for p in pending]))

    def approval_decided(self, round_no: int, decisions: list[Decision]) -> None:
        self.events.append(("approval_decided", [d.model_dump(exclude_none=True) for d in decisions]))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


def tool_results(outcome: ReasonerOutcome, round_no: int = 0) -> list[FunctionCallResult]:
    (message,) = [m for m in outcome.messages if m.role == "tool" and m.round == round_no]
    return message.function_results


def sent(model: ScriptedModelService, turn: int) -> str:
    return "\n".join(str(m["content"]) for m in model.calls[turn]["messages"])


# -- the pure rules ---------------------------------------------------------------------------

PENDING = [
    PendingCall(index=2, tool="send_email", args={"to": "a@b.c", "subject": "s"}, objective="o"),
    PendingCall(index=3, tool="delete_file", args={"path": "/tmp/x"}),
]


@pytest.mark.parametrize(
    ("decisions", "expected"),
    [
        pytest.param(True, {2: (True, None, None), 3: (True, None, None)}, id="approve-all"),
        pytest.param(
            False,
            {2: (False, "rejected without a reason", None), 3: (False, "rejected without a reason", None)},
            id="reject-all",
        ),
        pytest.param(
            [
                {"index": 2, "approve": True, "args": {"to": "c@d.e", "subject": "t"}},
                {"index": 3, "approve": False, "reason": "no"},
            ],
            {2: (True, None, {"to": "c@d.e", "subject": "t"}), 3: (False, "no", None)},
            id="edit-and-reject",
        ),
        pytest.param(
            [Decision(index=3, approve=True), Decision(index=2, approve=False, reason=" ")],
            {2: (False, "rejected without a reason", None), 3: (True, None, None)},
            id="decision-objects-blank-reason",
        ),
    ],
)
def test_valid_decisions(decisions: Any, expected: dict[int, tuple[Any, ...]]) -> None:
    decided = validate_decisions(PENDING, decisions, TOOLS)
    assert {i: (d.approve, d.reason, d.args) for i, d in decided.items()} == expected


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        pytest.param(
            [{"index": 7, "approve": True}, {"index": 2, "approve": True}],
            r"no call 7 is waiting.*waiting calls: 2, 3",
            id="unknown-index",
        ),
        pytest.param(
            [{"index": 2, "approve": True}, {"index": 2, "approve": False}],
            "call 2 has two decisions",
            id="duplicate",
        ),
        pytest.param(
            [{"index": 2, "approve": False, "args": {"to": "x"}}, {"index": 3, "approve": True}],
            "rejected but its decision has args",
            id="args-on-reject",
        ),
        pytest.param(
            [{"index": 2, "approve": True, "args": {"to": "x"}}, {"index": 3, "approve": True}],
            r"edited args of call 2 \('send_email'\).*field 'subject': required",
            id="edited-args-missing-field",
        ),
        pytest.param(
            [
                {"index": 2, "approve": True, "args": {"to": "x", "subject": "s", "cc": "y"}},
                {"index": 3, "approve": True},
            ],
            "field 'cc': unknown parameter",
            id="edited-args-unknown-field",
        ),
        pytest.param([{"index": 2, "approve": True}], r"no decision for call\(s\) 3", id="missing"),
        pytest.param([{"index": 2}], r"field 'approve': Field required", id="no-approve-field"),
        pytest.param(
            [{"index": 2, "approve": True, "note": "x"}], "field 'note': unknown field", id="extra-field"
        ),
        pytest.param("yes", "decisions must be a list", id="not-a-list"),
        pytest.param([{"index": 0, "approve": True}], "field 'index'", id="index-zero"),
    ],
)
def test_unusable_decisions_are_refused_whole(decisions: Any, message: str) -> None:
    with pytest.raises(ApprovalError, match=message):
        validate_decisions(PENDING, decisions, TOOLS)


def test_partial_decisions_when_not_all_are_required() -> None:
    decided = validate_decisions(PENDING, [{"index": 3, "approve": True}], TOOLS, require_all=False)
    assert list(decided) == [3]


def test_which_calls_wait() -> None:
    calls = [
        ParsedFunctionCall(name="add", args={"a": 1, "b": 2}),
        ParsedFunctionCall(name="send_email", args={"to": "x"}, call_objective="why"),
        ParsedFunctionCall(name="delete_file", args={"path": "p"}),
        ParsedFunctionCall(name="send_email", error="bad JSON"),  # fails anyway: never waits
        ParsedFunctionCall(name="nope"),  # unknown: fails anyway
    ]
    assert [p.index for p in pending_calls(calls, TOOLS)] == [2]
    assert [p.index for p in pending_calls(calls, TOOLS, ["delete_file"])] == [2, 3]
    everything = pending_calls(calls, TOOLS, "all", round_no=4, call_ids=["a", "b", "c", "d", "e"])
    assert [(p.index, p.tool, p.round, p.call_id) for p in everything] == [
        (1, "add", 4, "a"),
        (2, "send_email", 4, "b"),
        (3, "delete_file", 4, "c"),
    ]
    assert everything[1].objective == "why" and everything[1].args == {"to": "x"}


@pytest.mark.parametrize("value", ["some", ["add", ""], [3], None])
def test_approve_tools_is_validated(value: Any) -> None:
    with pytest.raises(ValueError, match="approve_tools"):
        validate_approve_tools(value)
    with pytest.raises(ConfigurationError, match="approve_tools"):
        Task(goal="g", approve_tools=value)


@pytest.mark.parametrize("value", [0, -1, True, "5"])
def test_approval_timeout_is_validated(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="approval_timeout_s"):
        Task(goal="g", approval_timeout_s=value)


def test_a_runner_never_runs_an_unapproved_call() -> None:
    runner = ToolRunner()
    call = ParsedFunctionCall(name="send_email", args={"to": "x", "subject": "s"})
    refused = runner.run_call({"send_email": send_email}, call, 1)
    assert refused.status == FAILED and "needs a person's approval" in refused.output
    assert outbox == []
    done = runner.run_call({"send_email": send_email}, call, 1, approved=True)
    assert done.status == OK and outbox == [{"to": "x", "subject": "s", "body": ""}]


def test_decorator_and_from_function_declare_approval() -> None:
    assert send_email.requires_approval
    assert Tool.from_function(add, requires_approval=True).requires_approval
    assert not Tool.from_function(add).requires_approval


# -- in-process runs, sync and async ----------------------------------------------------------

Runner = Callable[..., ReasonerOutcome]


def run_mono(
    approve: Any, *, is_async: bool = False, **task_kwargs: Any
) -> tuple[ReasonerOutcome, ScriptedModelService, Recorder]:
    model = ScriptedModelService([ROUND_0, DELIVER])
    hooks = Recorder()
    reasoner = MonoModelReasoner(model, hooks=hooks, approve=approve)
    task = Task(goal="Add and tell Bob", tools=TOOLS, **task_kwargs)
    outcome = asyncio.run(reasoner.arun(task)) if is_async else reasoner.run(task)
    return outcome, model, hooks


MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


@pytest.mark.parametrize("is_async", MODES)
def test_approved_call_runs_after_the_free_one(is_async: bool) -> None:
    asked: list[list[PendingCall]] = []

    def approve(pending: list[PendingCall]) -> bool:
        asked.append(pending)
        if not is_async:  # the sync loop runs free calls first; the async one while asking
            assert ran == ["add"], "calls needing no approval run first"
        return True

    outcome, _model, hooks = run_mono(approve, is_async=is_async)
    assert outcome.status == "completed", outcome.error
    [[pending]] = asked
    assert (pending.index, pending.tool, pending.args, pending.objective) == (
        2,
        "send_email",
        {"to": "bob@example.com", "subject": "Sum"},
        "tell Bob the sum",
    )
    assert ran == ["add", "send_email"]
    assert [(r.index, r.status) for r in tool_results(outcome)] == [(1, OK), (2, OK)]
    assert hooks.kinds() == [
        "tool_called",
        "approval_requested",
        "approval_decided",
        "tool_called",
        "tool_returned",
        "tool_returned",
    ]
    assert hooks.events[2][1] == [{"index": 2, "approve": True}]


@pytest.mark.parametrize("is_async", MODES)
def test_edited_args_are_what_runs(is_async: bool) -> None:
    edited = {"to": "alice@example.com", "subject": "Sum", "body": "5"}
    outcome, model, _ = run_mono(lambda p: [{"index": 2, "approve": True, "args": edited}], is_async=is_async)
    assert outcome.status == "completed", outcome.error
    assert outbox == [edited]
    result = tool_results(outcome)[1]
    assert result.args == edited and result.output == "sent to alice@example.com"
    assert "alice@example.com" in sent(model, 1)


@pytest.mark.parametrize("is_async", MODES)
def test_a_rejection_reaches_the_model_as_a_failed_result(is_async: bool) -> None:
    outcome, model, hooks = run_mono(
        lambda p: [Decision(index=2, approve=False, reason="Bob is on holiday")], is_async=is_async
    )
    assert outcome.status == "completed", outcome.error
    assert outbox == [] and ran == ["add"]
    rejected = tool_results(outcome)[1]
    assert (rejected.index, rejected.name, rejected.status) == (2, "send_email", FAILED)
    assert "rejected it. Reason: Bob is on holiday" in rejected.output
    assert rejected.to_prompt() in sent(model, 1)
    assert hooks.events[2][1] == [{"index": 2, "approve": False, "reason": "Bob is on holiday"}]


def test_no_decision_in_time_is_a_rejection_sync() -> None:
    release = threading.Event()

    def slow(pending: list[PendingCall]) -> bool:
        release.wait(10)
        return True

    started = time.monotonic()
    outcome, _, _ = run_mono(slow, approval_timeout_s=0.3)
    release.set()
    assert outcome.status == "completed", outcome.error
    assert time.monotonic() - started < 5
    assert outbox == []
    assert "Reason: no decision within 0.3 s" in tool_results(outcome)[1].output


def test_no_decision_in_time_is_a_rejection_async() -> None:
    async def slow(pending: list[PendingCall]) -> bool:
        await asyncio.sleep(10)
        return True

    started = time.monotonic()
    outcome, _, hooks = run_mono(slow, is_async=True, approval_timeout_s=0.3)
    assert outcome.status == "completed", outcome.error
    assert time.monotonic() - started < 5
    assert outbox == []
    assert "Reason: no decision within 0.3 s" in tool_results(outcome)[1].output
    assert hooks.events[2][1] == [{"index": 2, "approve": False, "reason": "no decision within 0.3 s"}]


@pytest.mark.parametrize("is_async", MODES)
def test_without_an_approver_the_call_is_rejected(is_async: bool) -> None:
    outcome, _, _ = run_mono(None, is_async=is_async)
    assert outcome.status == "completed"
    assert outbox == []
    assert "has no approve callback" in tool_results(outcome)[1].output


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize(
    ("approve", "message"),
    [
        pytest.param(lambda p: [{"index": 9, "approve": True}], "no call 9 is waiting", id="unknown-index"),
        pytest.param(lambda p: 1 / 0, "the approve callback raised ZeroDivisionError", id="raises"),
    ],
)
def test_an_unusable_answer_fails_the_run_and_runs_nothing(
    is_async: bool, approve: Any, message: str
) -> None:
    outcome, _, _ = run_mono(approve, is_async=is_async)
    assert outcome.status == "failed"
    assert outcome.error is not None and "ApprovalError" in outcome.error and message in outcome.error
    assert outbox == []


@pytest.mark.parametrize("is_async", MODES)
def test_approve_tools_adds_tools_to_review(is_async: bool) -> None:
    reply = (
        "<action>\n"
        + fc("delete_file", {"path": "/srv/data"})
        + "\n"
        + fc("add", {"a": 1, "b": 1})
        + "\n</action>"
    )
    model = ScriptedModelService([reply, DELIVER])
    asked: list[str] = []

    async def approve(pending: list[PendingCall]) -> list[Decision]:
        asked.extend(p.tool for p in pending)
        return [Decision(index=p.index, approve=False, reason="not today") for p in pending]

    reasoner = MonoModelReasoner(model, approve=approve)
    task = Task(goal="clean up", tools=TOOLS, approve_tools=["delete_file"])
    outcome = asyncio.run(reasoner.arun(task)) if is_async else reasoner.run(task)
    assert outcome.status == "completed", outcome.error
    assert asked == ["delete_file"]
    assert ran == ["add"]


def test_dual_reasoner_asks_too() -> None:
    thinker = ScriptedModelService(
        ["<instruction>send it</instruction>", "<instruction>TASK_DONE</instruction>"], name="thinker"
    )
    actor = ScriptedModelService([ROUND_0, DELIVER], name="actor")
    outcome = DualModelReasoner(thinker, actor, approve=lambda p: False).run(
        Task(goal="Add and tell Bob", tools=TOOLS)
    )
    assert outcome.status == "completed"
    assert outbox == [] and ran == ["add"]
    assert "rejected it. Reason: rejected without a reason" in sent(thinker, 1)


@pytest.mark.parametrize("is_async", MODES)
def test_react_native_calls_keep_their_ids(is_async: bool) -> None:
    calling = ModelMessage(
        role="actor",
        content="",
        tool_calls=[
            NativeToolCall(id="c-add", name="add", arguments='{"a": 2, "b": 3}'),
            NativeToolCall(
                id="c-mail", name="send_email", arguments='{"to": "bob@example.com", "subject": "s"}'
            ),
        ],
    )
    model = ScriptedModelService([calling, "The sum is 5; the email was not sent."])
    seen: list[PendingCall] = []

    def approve(pending: list[PendingCall]) -> list[dict[str, Any]]:
        seen.extend(pending)
        return [{"index": 2, "approve": False, "reason": "no emails today"}]

    reasoner = ReActReasoner(model, max_steps=5, approve=approve)
    task = Task(goal="Add and tell Bob", tools=TOOLS)
    outcome = asyncio.run(reasoner.arun(task)) if is_async else reasoner.run(task)
    assert outcome.status == "completed", outcome.error
    assert [(p.index, p.call_id) for p in seen] == [(2, "c-mail")]
    results = tool_results(outcome)
    assert [(r.call_id, r.status) for r in results] == [("c-add", OK), ("c-mail", FAILED)]
    tool_messages = [m for m in model.calls[1]["messages"] if m["role"] == "tool"]
    assert tool_messages[1]["tool_call_id"] == "c-mail"
    assert "Reason: no emails today" in tool_messages[1]["content"]
    assert outbox == []
