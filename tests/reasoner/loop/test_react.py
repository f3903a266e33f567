"""``ReActReasoner`` and ``ReActPlan``.

Native mode runs against the local OpenAI-compatible test server through ``LiteLlmModelService``
(real HTTP, real ``tool_calls``); prompt mode uses ``ScriptedModelService``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.reasoner import ReActReasoner
from tandem.reasoner.errors import ConfigurationError, ModelCallError, ReasonerError
from tandem.reasoner.function_calling import FUNCTION_CALLING_GUIDE
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.loop.calls import native_to_call
from tandem.reasoner.loop.react import ReActPlan
from tandem.reasoner.loop.react_budget import NEEDS_MORE_STEPS, rounds_for, steps_left, tools_fit
from tandem.reasoner.loop.step import Step, StepInputs
from tandem.reasoner.memory import InMemoryReasonerMemory
from tandem.reasoner.messages import FunctionCallStatus, ModelMessage, NativeToolCall
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import InjectionMapping, ToolCallContext
from tandem.toolkit.describe import describe_tools
from tandem.toolkit.tool import Tool
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

# -- tools ----------------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot handle {reason}")


def finish_with(text: str) -> str:
    """Give the final answer."""
    return f"FINAL: {text}"


class Database:
    """A service injected into tools, never seen by the model."""

    def __init__(self, name: str) -> None:
        self.name = name


ADD = Tool.from_function(add)
EXPLODE = Tool.from_function(explode)
FINISH = Tool.from_function(finish_with, return_direct=True)


def sleeper(name: str, seconds: float, log: list[tuple[str, float, float]]) -> Tool:
    def fn(x: int) -> str:
        start = time.monotonic()
        time.sleep(seconds)
        log.append((name, start, time.monotonic()))
        return f"{name}:{x}"

    return Tool.from_function(fn, name=name, description=f"sleeps {seconds} s")


def valid_history(messages: list[dict[str, Any]]) -> None:
    """Assert that every assistant tool call is answered, in order, before the next message."""
    pending: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            assert pending, f"a tool message without a call: {m}"
            assert m["tool_call_id"] == pending.pop(0)
            continue
        assert not pending, f"calls {pending} have no result before a {m['role']} message"
        if m["role"] == "assistant":
            pending = [c["id"] for c in m.get("tool_calls") or []]
    assert not pending, f"the history ends with unanswered calls {pending}"
    assert messages[-1]["role"] in ("user", "tool")


def no_dangling_calls(outcome: ReasonerOutcome) -> None:
    """Assert that every stored reply with tool calls has a stored result for each call."""
    tools = {m.round: m for m in outcome.messages if m.role == "tool"}
    for m in outcome.messages:
        if m.role == "actor" and m.tool_calls:
            assert m.round in tools, f"round {m.round} asked for tools and has no results"
            assert [r.call_id for r in tools[m.round].function_results] == [c.id for c in m.tool_calls]


# -- the server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer("warm") as running:
        # Import LiteLLM and open a connection once, so timings below measure the loop only.
        LiteLlmModelService("openai/test", api_base=running.url, api_key="x").generate(
            "", [{"role": "user", "content": "hi"}]
        )
        yield running


@pytest.fixture
def host(server: OpenAIServer) -> LiteLlmModelService:
    server.clear()
    return LiteLlmModelService("openai/test", api_base=server.url, api_key="x", max_retries=0)


def call(id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


# -- native mode against the server -------------------------------------------------------


def test_calls_run_in_parallel(server: OpenAIServer, host: LiteLlmModelService) -> None:
    log: list[tuple[str, float, float]] = []
    tools = [sleeper("slow_a", 1.0, log), sleeper("slow_b", 1.0, log)]
    server.set_script(
        [
            Reply(tool_calls=[call("c1", "slow_a", {"x": 1}), call("c2", "slow_b", {"x": 2})]),
            Reply("both done"),
        ]
    )

    outcome = ReActReasoner(host).run(Task(goal="run both", tools=tools))

    assert outcome.status == "completed" and outcome.deliverable == "both done"
    (_, start_a, end_a), (_, start_b, end_b) = sorted(log)
    assert start_a < end_b and start_b < end_a, "the two calls did not overlap"
    assert [m["content"] for m in tool_messages(server.requests[1])] == ["slow_a:1", "slow_b:2"]


def test_results_come_back_in_call_order_with_their_ids(
    server: OpenAIServer, host: LiteLlmModelService
) -> None:
    log: list[tuple[str, float, float]] = []
    # The first call finishes last: results must still follow the order of the calls.
    tools = [sleeper("t1", 0.3, log), sleeper("t2", 0.15, log), sleeper("t3", 0.0, log)]
    calls = [call("id-x", "t1", {"x": 1}), call("id-y", "t2", {"x": 2}), call("id-z", "t3", {"x": 3})]
    server.set_script([Reply(content="Let me check.", tool_calls=calls), Reply("ok")])

    outcome = ReActReasoner(host).run(Task(goal="g", tools=tools))

    assert outcome.status == "completed"
    assert [name for name, _, _ in log] == ["t3", "t2", "t1"]
    second = server.requests[1]
    valid_history(second["messages"])
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["content"] == "Let me check."
    assert [c["id"] for c in assistant["tool_calls"]] == ["id-x", "id-y", "id-z"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages(second)] == [
        ("id-x", "t1:1"),
        ("id-y", "t2:2"),
        ("id-z", "t3:3"),
    ]
    stored = [r.call_id for r in outcome.messages[1].function_results]
    assert stored == ["id-x", "id-y", "id-z"]


def test_tool_errors_go_back_to_the_model(server: OpenAIServer, host: LiteLlmModelService) -> None:
    calls = [
        call("u", "substract", {"a": 1}),
        call("v", "add", {"a": "three", "b": 1}),
        call("w", "add", {"a": 1}),
        call("x", "explode", {"reason": "Mondays"}),
        call("y", "add", '{"a": 1, "b": '),
    ]
    server.set_script([Reply(tool_calls=calls), Reply("I give up")])

    outcome = ReActReasoner(host).run(Task(goal="g", tools=[ADD, EXPLODE]))

    assert outcome.status == "completed"
    results = tool_messages(server.requests[1])
    assert [m["tool_call_id"] for m in results] == ["u", "v", "w", "x", "y"]
    unknown, bad_type, missing, raised, bad_json = (m["content"] for m in results)
    assert "no tool named 'substract'" in unknown and "Valid tool names: add, explode" in unknown
    assert "'a'" in bad_type and "integer" in bad_type and "Fix" in bad_type
    assert "'b'" in missing and "missing" in missing and "Fix" in missing
    assert "ValueError" in raised and "cannot handle Mondays" in raised
    assert "not valid JSON" in bad_json and "JSON object" in bad_json and "<function_call>" not in bad_json
    assert all(r.status == FunctionCallStatus.FAILED for r in outcome.messages[1].function_results)


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5])
def test_budget_always_ends_without_dangling_calls(
    server: OpenAIServer, host: LiteLlmModelService, budget: int
) -> None:
    ran: list[int] = []

    def ping() -> str:
        """Ping."""
        ran.append(1)
        return "pong"

    def always_tools(request: RecordedRequest) -> Reply:
        n = request.number
        return Reply(tool_calls=[call(f"p{n}a", "ping", {}), call(f"p{n}b", "ping", {})])

    server.set_script(always_tools)

    outcome = ReActReasoner(host, max_steps=budget).run(
        Task(goal="loop forever", tools=[Tool.from_function(ping)])
    )

    assert outcome.status == "truncated"
    assert outcome.deliverable.startswith(NEEDS_MORE_STEPS) and "ping" in outcome.deliverable
    assert outcome.error is not None and f"({budget} steps)" in outcome.error
    model_steps = (budget + 1) // 2
    tool_steps = (budget - 1) // 2
    assert server.request_count == model_steps
    assert model_steps + tool_steps <= budget
    assert len(ran) == 2 * tool_steps  # two calls per tool step
    for request in server.requests:
        valid_history(request["messages"])
    no_dangling_calls(outcome)
    last = outcome.messages[-1]
    assert last.role == "actor" and not last.tool_calls and last.round == model_steps - 1


def test_return_direct_ends_the_run_with_the_tool_output(
    server: OpenAIServer, host: LiteLlmModelService
) -> None:
    server.set_script(
        [
            Reply(tool_calls=[call("a", "add", {"a": 2, "b": 2})]),
            Reply(tool_calls=[call("f", "finish_with", {"text": "four"})]),
            Reply("never asked"),
        ]
    )

    outcome = ReActReasoner(host).run(Task(goal="g", tools=[ADD, FINISH]))

    assert outcome.status == "completed"
    assert outcome.deliverable == "FINAL: four"
    assert server.request_count == 2
    assert outcome.rounds == 2


def test_return_direct_needs_only_the_tool_step(server: OpenAIServer, host: LiteLlmModelService) -> None:
    # Budget 2: one model step, then one step left, enough for calls that all end the run.
    server.set_script([Reply(tool_calls=[call("f", "finish_with", {"text": "now"})])])
    outcome = ReActReasoner(host, max_steps=2).run(Task(goal="g", tools=[ADD, FINISH]))
    assert (outcome.status, outcome.deliverable) == ("completed", "FINAL: now")

    # With a normal call beside it, a model step is needed to read that result: no budget for it.
    server.set_script(
        [Reply(tool_calls=[call("f", "finish_with", {"text": "now"}), call("a", "add", {"a": 1, "b": 1})])]
    )
    outcome = ReActReasoner(host, max_steps=2).run(Task(goal="g", tools=[ADD, FINISH]))
    assert outcome.status == "truncated"
    no_dangling_calls(outcome)

    # A return_direct call that fails leaves results no model step can read: truncated.
    server.set_script([Reply(tool_calls=[call("f", "finish_with", {"wrong": 1})])])
    outcome = ReActReasoner(host, max_steps=2).run(Task(goal="g", tools=[ADD, FINISH]))
    assert outcome.status == "truncated" and outcome.deliverable.startswith(NEEDS_MORE_STEPS)
    no_dangling_calls(outcome)


def test_injected_parameters_are_hidden_and_dropped(server: OpenAIServer, host: LiteLlmModelService) -> None:
    services = InjectionMapping()
    services.register(Database, Database("live-db"))
    seen: list[tuple[str, ToolCallContext, str]] = []

    def lookup(key: str, ctx: ToolCallContext, db: Database) -> str:
        """Look a key up."""
        seen.append((key, ctx, db.name))
        return f"{key} found in {db.name}"

    tool = Tool.from_function(lookup, injection=services)
    forged = {"key": "k1", "ctx": {"job_id": "forged", "round": 99}, "db": "attacker"}
    server.set_script([Reply(tool_calls=[call("c", "lookup", forged)]), Reply("done")])

    outcome = ReActReasoner(host).run(Task(goal="g", tools=[tool], job_id="job-7", metadata={"tenant": "t1"}))

    assert outcome.status == "completed"
    schema = server.requests[0]["tools"][0]["function"]["parameters"]
    assert (
        set(schema["properties"]) == {"key"} and "ctx" not in str(schema) and "db" not in schema["properties"]
    )
    ((key, ctx, db_name),) = seen
    assert (key, db_name) == ("k1", "live-db")
    assert (ctx.job_id, ctx.round, ctx.call_index, ctx.metadata) == ("job-7", 0, 1, {"tenant": "t1"})
    assert tool_messages(server.requests[1])[0]["content"] == "k1 found in live-db"


def test_a_refusing_runner_is_made_to_drop(server: OpenAIServer, host: LiteLlmModelService) -> None:
    def whoami(ctx: ToolCallContext) -> str:
        """Say the job id."""
        return ctx.job_id

    server.set_script([Reply(tool_calls=[call("c", "whoami", {"ctx": {"job_id": "x"}})]), Reply("done")])
    reasoner = ReActReasoner(host, runner=ToolRunner(on_injected="refuse", timeout=5))
    outcome = reasoner.run(Task(goal="g", tools=[Tool.from_function(whoami)], job_id="real"))
    assert reasoner.runner.on_injected == "drop" and reasoner.runner.timeout == 5
    assert outcome.messages[1].function_results[0].output == "real"


def test_reasoning_is_never_sent_back(server: OpenAIServer, host: LiteLlmModelService) -> None:
    server.set_script(
        [
            Reply(
                content="Adding.",
                reasoning_content="SECRET-THOUGHTS",
                tool_calls=[call("a", "add", {"a": 1, "b": 2})],
            ),
            Reply(content="<think>MORE-SECRETS</think>It is 3."),
        ]
    )
    outcome = ReActReasoner(host).run(Task(goal="g", tools=[ADD]))
    assert outcome.deliverable == "It is 3."
    assert outcome.messages[0].reasoning == "SECRET-THOUGHTS"
    assert "SECRET" not in str(server.requests[1]["messages"])


def test_without_tools_no_tools_are_sent(server: OpenAIServer, host: LiteLlmModelService) -> None:
    server.set_script("Paris.")
    outcome = ReActReasoner(host).run(Task(goal="Capital of France?"))
    assert (outcome.status, outcome.deliverable, outcome.rounds) == ("completed", "Paris.", 1)
    assert "tools" not in server.requests[0]


def test_a_failing_host_fails_the_run(server: OpenAIServer, host: LiteLlmModelService) -> None:
    server.set_script([Reply(tool_calls=[call("a", "add", {"a": 1, "b": 2})]), Reply(status=401)])
    outcome = ReActReasoner(host).run(Task(goal="g", tools=[ADD]))
    assert outcome.status == "failed" and "401" in (outcome.error or "")
    assert len(outcome.messages) == 2  # the first round is kept


# -- prompt mode --------------------------------------------------------------------------


def block(name: str, args: dict[str, Any]) -> str:
    payload = json.dumps({"name": name, "call_objective": "why", "args": args})
    return f"<function_call>\n{payload}\n</function_call>"


def test_prompt_mode_describes_tools_and_feeds_results_as_text() -> None:
    model = ScriptedModelService(
        [
            "<think>two sums</think><action>\n"
            f"{block('add', {'a': 1, 'b': 2})}\n{block('add', {'a': 3, 'b': 4})}\n</action>",
            "<think>done</think>The sums are 3 and 7.",
        ]
    )

    outcome = ReActReasoner(model, function_calling="prompt").run(
        Task(goal="sum things", tools=[ADD, EXPLODE])
    )

    assert (outcome.status, outcome.deliverable) == ("completed", "The sums are 3 and 7.")
    first, second = model.calls
    assert first["tools"] is None and second["tools"] is None  # no tools= in prompt mode
    assert FUNCTION_CALLING_GUIDE in first["sys_prompt"]
    assert describe_tools([ADD, EXPLODE]) in first["sys_prompt"]
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "user"]
    results = second["messages"][-1]["content"]
    assert results.count("<function_call_result>") == 2
    assert results.index("add(a=1, b=2)") < results.index("add(a=3, b=4)")
    assert "output:\n3\n" in results and "output:\n7\n" in results
    assert "two sums" not in str(second["messages"])  # reasoning stays out


def test_prompt_mode_errors_and_budget() -> None:
    bad = '<function_call>\n{"name": "add", "args": {"a": 1,, }\n</function_call>'
    model = ScriptedModelService(lambda sys_prompt, messages: f"{bad}\n{block('nope', {})}")

    outcome = ReActReasoner(model, max_steps=3, function_calling="prompt").run(Task(goal="g", tools=[ADD]))

    assert outcome.status == "truncated" and outcome.deliverable.startswith(NEEDS_MORE_STEPS)
    assert len(model.calls) == 2
    fed_back = model.calls[1]["messages"][-1]["content"]
    assert "Expected: <function_call>" in fed_back  # the prompt protocol's own correction
    assert "There is no tool named 'nope'. Valid tool names: add." in fed_back
    assert "<function_call>" not in outcome.messages[-1].content  # the refused calls were dropped


def test_prompt_mode_drops_injected_values() -> None:
    def whoami(ctx: ToolCallContext) -> str:
        """Say the job id."""
        return f"job={ctx.job_id}"

    model = ScriptedModelService([block("whoami", {"ctx": "forged"}), "ok"])
    outcome = ReActReasoner(model, function_calling="prompt").run(
        Task(goal="g", tools=[Tool.from_function(whoami)], job_id="j1")
    )
    result = outcome.messages[1].function_results[0]
    assert (result.status, result.output) == (FunctionCallStatus.SUCCEEDED, "job=j1")


def test_native_mode_ignores_function_call_text() -> None:
    model = ScriptedModelService([f"Here is how you would call it: {block('add', {'a': 1, 'b': 1})}"])
    outcome = ReActReasoner(model).run(Task(goal="g", tools=[ADD]))
    assert outcome.status == "completed" and "<function_call>" in outcome.deliverable
    assert model.calls[0]["tools"] == ["add"]


# -- the plan's steps ----------------------------------------------------------------------

REACT = ReActPlan()


def react_step(
    model: ScriptedModelService, task: Task, memory: InMemoryReasonerMemory, round_no: int
) -> ModelMessage:
    """The model step of ``round_no`` (native mode, ``add`` offered)."""
    return REACT.run_model(Step(round_no, "actor"), model, StepInputs(task, memory, [ADD]))


def native(*calls: tuple[str, str, str], content: str = "") -> ModelMessage:
    return ModelMessage(
        role="actor",
        content=content,
        tool_calls=[NativeToolCall(id=i, name=n, arguments=a) for i, n, a in calls],
    )


def test_react_step_is_idempotent() -> None:
    model = ScriptedModelService([native(("c", "add", '{"a": 1, "b": 1}')), "unused"])
    memory = InMemoryReasonerMemory()
    task = Task(goal="g", max_rounds=5)
    first = react_step(model, task, memory, 0)
    again = react_step(model, task, memory, 0)
    assert first == again and len(model.calls) == 1
    assert REACT.after_model(Step(0, "actor"), first, task).kind == "tools"


def test_react_step_refuses_to_skip_pending_results() -> None:
    memory = InMemoryReasonerMemory([native(("c", "add", "{}")).model_copy(update={"round": 0})])
    with pytest.raises(ReasonerError, match="tool results of round 0"):
        react_step(ScriptedModelService(["x"]), Task(goal="g"), memory, 1)


def test_missing_and_duplicate_call_ids_are_made_unique() -> None:
    model = ScriptedModelService([native(("", "add", "{}"), ("dup", "add", "{}"), ("dup", "add", "{}"))])
    reply = react_step(model, Task(goal="g"), InMemoryReasonerMemory(), 0)
    ids = [c.id for c in reply.tool_calls]
    assert len(set(ids)) == 3 and all(ids) and ids[1] == "dup"


def test_view_answers_every_call_even_without_a_stored_result() -> None:
    reply = native(("a", "add", "{}"), ("b", "add", "{}"), content="<think>x</think>")
    view = REACT.view(Task(goal="g"), [reply], 1)
    valid_history(view)
    assert view[1]["content"] is None


def test_resume_from_memory_does_not_redo_stored_steps() -> None:
    memory = InMemoryReasonerMemory()
    first = ScriptedModelService([native(("c", "add", '{"a": 2, "b": 3}'))])
    task = Task(goal="g", tools=[ADD])
    reply = react_step(first, task, memory, 0)
    assert REACT.after_model(Step(0, "actor"), reply, task).kind == "tools"

    second = ScriptedModelService(["It is 5."])
    outcome = ReActReasoner(second).run(task, memory)

    assert (outcome.status, outcome.deliverable) == ("completed", "It is 5.")
    assert len(second.calls) == 1
    assert second.calls[0]["messages"][-1] == {"role": "tool", "tool_call_id": "c", "content": "5"}


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()

    def round_started(self, round_no: int, max_rounds: int) -> None:
        self.events.append(f"round {round_no}/{max_rounds}")

    def model_replied(self, message: ModelMessage) -> None:
        self.events.append(f"reply {message.round}")

    def tool_called(self, round_no: int, index: int, call: Any) -> None:
        self.events.append(f"call {round_no}.{index}")

    def tool_returned(self, round_no: int, result: Any) -> None:
        with self.lock:
            self.events.append(f"result {round_no}.{result.index}")

    def finished(self, outcome: ReasonerOutcome) -> None:
        self.events.append(f"finished {outcome.status}")


def test_hooks_follow_the_run() -> None:
    hooks = Recorder()
    model = ScriptedModelService(
        [native(("a", "add", '{"a": 1, "b": 1}'), ("b", "add", '{"a": 2, "b": 2}')), "4"]
    )
    ReActReasoner(model, max_steps=4, hooks=hooks).run(Task(goal="g", tools=[ADD]))
    assert hooks.events == [
        "round 0/2",
        "reply 0",
        "call 0.1",
        "call 0.2",
        "result 0.1",
        "result 0.2",
        "round 1/2",
        "reply 1",
        "finished completed",
    ]


def test_model_errors_fail_the_run_and_infer_raises() -> None:
    model = ScriptedModelService([ModelCallError("host down", model="m")])
    reasoner = ReActReasoner(model)
    assert reasoner.run(Task(goal="g")).status == "failed"
    with pytest.raises(ReasonerError):
        ReActReasoner(ScriptedModelService([ModelCallError("host down", model="m")])).infer(Task(goal="g"))
    assert ReActReasoner(ScriptedModelService(["42"])).infer(Task(goal="g")) == "42"


@pytest.mark.parametrize("kwargs", [{"max_steps": 0}, {"max_steps": True}, {"function_calling": "xml"}])
def test_bad_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ReActReasoner(ScriptedModelService(["x"]), **kwargs)


@pytest.mark.parametrize(
    ("budget", "round_no", "direct_only", "fits"),
    [
        pytest.param(1, 0, False, False, id="1-step-no-tools"),
        pytest.param(1, 0, True, False, id="1-step-no-room-even-for-direct"),
        pytest.param(2, 0, False, False, id="2-steps-no-room-to-read"),
        pytest.param(2, 0, True, True, id="2-steps-direct-fits"),
        pytest.param(3, 0, False, True, id="3-steps-first-round"),
        pytest.param(3, 1, False, False, id="3-steps-second-round"),
        pytest.param(4, 1, True, True, id="4-steps-second-round-direct"),
        pytest.param(25, 11, False, True, id="25-steps-round-12"),
        pytest.param(25, 12, False, False, id="25-steps-round-13-is-last"),
    ],
)
def test_budget_rule(budget: int, round_no: int, direct_only: bool, fits: bool) -> None:
    name = "finish_with" if direct_only else "add"
    calls = [native_to_call(NativeToolCall(id="c", name=name, arguments='{"text": "x"}'))]
    assert tools_fit(budget, round_no, calls, [ADD, FINISH]) is fits
    assert steps_left(budget, round_no) == budget - 2 * round_no - 1
    assert round_no < rounds_for(budget)
