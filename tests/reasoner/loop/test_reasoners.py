"""``DualModelReasoner`` and ``MonoModelReasoner`` end to end with scripted models.

What each model was sent is read back from ``ScriptedModelService.calls``: that is what a real
host would have received.
"""

from __future__ import annotations

import json
from typing import Any

import fakeredis
import pytest

from tandem.reasoner import DualModelReasoner, MonoModelReasoner
from tandem.reasoner.errors import ModelCallError, ReasonerError
from tandem.reasoner.function_calling import FUNCTION_CALLING_GUIDE, ParsedFunctionCall
from tandem.reasoner.hooks import ReasonerHooks
from tandem.reasoner.loop.reasoner import Reasoner
from tandem.reasoner.memory import InMemoryReasonerMemory, RedisReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, FunctionCallStatus, ModelMessage
from tandem.reasoner.prompts import round_note
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.reasoner.testing import ScriptedModelService
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

FAILED, OK = FunctionCallStatus.FAILED, FunctionCallStatus.SUCCEEDED

# -- tools ------------------------------------------------------------------------------------------

seen_contexts: list[ToolCallContext] = []


def whoami(label: str, ctx: ToolCallContext) -> str:
    """Report the injected context."""
    seen_contexts.append(ctx)
    return f"{label}: job={ctx.job_id} round={ctx.round} call={ctx.call_index}"


def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(f"cannot handle {reason}")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [Tool.from_function(f) for f in (whoami, explode, add)]


@pytest.fixture(autouse=True)
def _fresh_contexts() -> None:
    seen_contexts.clear()


# -- script helpers -------------------------------------------------------------------------------


def fc(name: str, args: dict[str, Any]) -> str:
    payload = {"name": name, "call_objective": f"use {name}", "args": args}
    return f"<function_call>\n{json.dumps(payload)}\n</function_call>"


def acting(*calls: str, thinking: str = "") -> str:
    head = f"<think>{thinking}</think>" if thinking else ""
    return f"{head}<shallow_thinking>act</shallow_thinking>\n<action>\n" + "\n".join(calls) + "\n</action>"


def instruct(text: str, thinking: str = "") -> str:
    head = f"<think>{thinking}</think>" if thinking else ""
    return (
        f"{head}<deep_thinking>plan</deep_thinking>\n<instruction>{text}</instruction>\n<input>none</input>"
    )


MALFORMED = '<function_call>\n{"name": "add", "args": {"a": 1,, "b": 2}}\n</function_call>'
DELIVER = "<shallow_thinking>done</shallow_thinking>\n<deliverable>The sum is 8.</deliverable>"


def sent(model: ScriptedModelService, turn: int) -> str:
    """Everything the model received in ``turn`` (system prompt excluded)."""
    return "\n".join(str(m["content"]) for m in model.calls[turn]["messages"])


def last_user(model: ScriptedModelService, turn: int) -> str:
    messages = model.calls[turn]["messages"]
    assert messages[-1]["role"] == "user"
    return str(messages[-1]["content"])


def tool_message(outcome: ReasonerOutcome, round_no: int) -> ModelMessage:
    (message,) = [m for m in outcome.messages if m.role == "tool" and m.round == round_no]
    return message


# -- the scenario shared by both reasoners -----------------------------------------------------------
#
# round 0: whoami (context), explode (fails), add with a bad field
# round 1: add corrected (succeeds) + a malformed block
# round 2: the deliverable

ROUND_0 = acting(
    fc("whoami", {"label": "me"}),
    fc("explode", {"reason": "disk full"}),
    fc("add", {"a": "seven", "b": 1}),
    thinking="SECRET-ACTOR-0",
)
ROUND_1 = acting(fc("add", {"a": 7, "b": 1}), MALFORMED, thinking="SECRET-ACTOR-1")


def dual_models() -> tuple[ScriptedModelService, ScriptedModelService]:
    thinker = ScriptedModelService(
        [
            instruct("call the tools", thinking="SECRET-THINKER-0"),
            instruct("fix the add call", thinking="SECRET-THINKER-1"),
            instruct("TASK_DONE: deliver the sum", thinking="SECRET-THINKER-2"),
        ],
        name="thinker-host",
    )
    actor = ScriptedModelService([ROUND_0, ROUND_1, DELIVER], name="actor-host")
    return thinker, actor


def mono_model() -> ScriptedModelService:
    return ScriptedModelService([ROUND_0, ROUND_1, "TASK_DONE\n" + DELIVER], name="mono-host")


def run_dual() -> tuple[ReasonerOutcome, list[ScriptedModelService]]:
    thinker, actor = dual_models()
    outcome = DualModelReasoner(thinker, actor).run(
        Task(goal="Add seven and one", tools=TOOLS, job_id="job-1")
    )
    return outcome, [thinker, actor]


def run_mono() -> tuple[ReasonerOutcome, list[ScriptedModelService]]:
    model = mono_model()
    outcome = MonoModelReasoner(model).run(Task(goal="Add seven and one", tools=TOOLS, job_id="job-1"))
    return outcome, [model]


RUNS = [pytest.param(run_dual, id="dual"), pytest.param(run_mono, id="mono")]


@pytest.mark.parametrize("run", RUNS)
def test_the_scenario_completes(run: Any) -> None:
    outcome, models = run()
    assert outcome.status == "completed", outcome.error
    assert outcome.deliverable == "The sum is 8."
    assert outcome.rounds == 3 and outcome.error is None
    assert all(len(m.calls) == 3 for m in models)


@pytest.mark.parametrize("run", RUNS)
def test_tools_see_the_injected_context(run: Any) -> None:
    outcome, _ = run()
    (ctx,) = seen_contexts
    assert (ctx.job_id, ctx.round, ctx.call_index, ctx.role) == ("job-1", 0, 1, "actor")
    first = tool_message(outcome, 0).function_results[0]
    assert (first.status, first.output) == (OK, "me: job=job-1 round=0 call=1")


@pytest.mark.parametrize("run", RUNS)
def test_a_failing_tool_reaches_every_model_next_turn(run: Any) -> None:
    outcome, models = run()
    failed = tool_message(outcome, 0).function_results[1]
    assert (failed.index, failed.name, failed.status) == (2, "explode", FAILED)
    assert failed.output == "'explode' raised RuntimeError: cannot handle disk full"

    block = failed.to_prompt()
    assert block.startswith("<function_call_result>\ncall 2: explode(reason='disk full')\nstatus: failed")
    for model in models:  # the Thinker and the Actor (or the one mono model)
        assert "<function_call_result>" not in sent(model, 0)
        assert block in sent(model, 1), model.name


@pytest.mark.parametrize("run", RUNS)
def test_an_invalid_call_is_corrected_after_the_model_reads_why(run: Any) -> None:
    outcome, models = run()
    bad = tool_message(outcome, 0).function_results[2]
    assert (bad.name, bad.status, bad.args) == ("add", FAILED, {"a": "seven", "b": 1})
    assert "field 'a'" in bad.output and "valid integer" in bad.output

    actor = models[-1]
    assert "field 'a'" in sent(actor, 1) and "valid integer" in sent(actor, 1)
    fixed = tool_message(outcome, 1).function_results[0]
    assert (fixed.name, fixed.status, fixed.output) == ("add", OK, "8")
    assert "call 1: add(a=7, b=1)\nstatus: succeeded" in sent(actor, 2)


@pytest.mark.parametrize("run", RUNS)
def test_a_malformed_block_is_reported_briefly(run: Any) -> None:
    outcome, models = run()
    malformed = tool_message(outcome, 1).function_results[1]
    assert (malformed.index, malformed.status) == (2, FAILED)
    assert "was not run: invalid JSON" in malformed.output
    assert "Expected: <function_call>" in malformed.output
    for model in models:
        later = sent(model, 2)
        assert malformed.output in later
        assert FUNCTION_CALLING_GUIDE not in later and "## Calling functions" not in later


@pytest.mark.parametrize("run", RUNS)
def test_reasoning_is_kept_but_never_sent_back(run: Any) -> None:
    outcome, models = run()
    assert {m.reasoning for m in outcome.messages if m.reasoning} >= {"SECRET-ACTOR-0", "SECRET-ACTOR-1"}
    for model in models:
        for i, recorded in enumerate(model.calls):
            assert "SECRET" not in sent(model, i) and "SECRET" not in recorded["sys_prompt"]
    assert all("<think>" not in m.content for m in outcome.messages)


@pytest.mark.parametrize("run", RUNS)
def test_usage_is_summed_over_every_model_call(run: Any) -> None:
    outcome, models = run()
    assert outcome.usage.calls == sum(len(m.calls) for m in models)
    model_messages = [m for m in outcome.messages if m.role != "tool"]
    assert outcome.usage.prompt_tokens == sum(m.usage.prompt_tokens for m in model_messages) > 0
    assert outcome.usage.completion_tokens == sum(m.usage.completion_tokens for m in model_messages) > 0
    assert outcome.usage.total_tokens == outcome.usage.prompt_tokens + outcome.usage.completion_tokens


def test_dual_messages_are_stored_in_round_order_with_their_models() -> None:
    outcome, _ = run_dual()
    assert [(m.round, m.role, m.model) for m in outcome.messages] == [
        (0, "thinker", "thinker-host"),
        (0, "actor", "actor-host"),
        (0, "tool", None),
        (1, "thinker", "thinker-host"),
        (1, "actor", "actor-host"),
        (1, "tool", None),
        (2, "thinker", "thinker-host"),
        (2, "actor", "actor-host"),
    ]


def test_dual_actor_reads_the_thinkers_instruction_of_its_round() -> None:
    _, (thinker, actor) = run_dual()
    assert "<instruction>fix the add call</instruction>" in last_user(actor, 1)
    assert "plan" not in last_user(actor, 1)  # the Thinker's deep thinking stays with the Thinker
    assert thinker.calls[0]["sys_prompt"].startswith("You are the Thinker")
    assert "whoami" in thinker.calls[0]["sys_prompt"]  # it plans with the Actor's tools in view


# -- round budget ---------------------------------------------------------------------------------


def test_dual_truncates_at_max_rounds_and_notes_every_round() -> None:
    thinker = ScriptedModelService(lambda sys, msgs: instruct("keep going"), name="t")
    actor = ScriptedModelService(lambda sys, msgs: acting(fc("add", {"a": 1, "b": 1})), name="a")
    outcome = DualModelReasoner(thinker, actor).run(Task(goal="never ends", tools=TOOLS, max_rounds=3))

    assert outcome.status == "truncated"
    assert outcome.deliverable == "" and outcome.rounds == 3
    assert "max_rounds" in str(outcome.error)
    assert len(thinker.calls) == len(actor.calls) == 3
    # The calls of the last round are not run: the budget is spent.
    assert [m.round for m in outcome.messages if m.role == "tool"] == [0, 1]

    for i in range(3):
        assert last_user(thinker, i).endswith(round_note(i, 3, "thinker"))
        assert round_note(i, 3, "actor") in last_user(actor, i)
        assert f"[Round {i + 1} of 3; {2 - i} round" in last_user(actor, i)
    assert "This is the last round: write TASK_DONE" in last_user(thinker, 2)
    assert "This is the last round: write the <deliverable>" in last_user(actor, 2)
    assert "last round" not in last_user(thinker, 1) + last_user(actor, 1)


def test_mono_truncates_at_max_rounds_and_notes_every_round() -> None:
    model = ScriptedModelService(lambda sys, msgs: "<action>still working</action>", name="m")
    outcome = MonoModelReasoner(model).run(Task(goal="never ends", max_rounds=2))

    assert (outcome.status, outcome.deliverable, outcome.rounds) == ("truncated", "", 2)
    assert len(model.calls) == 2
    assert last_user(model, 0).endswith(round_note(0, 2, "actor"))
    assert last_user(model, 1).endswith(
        "[Round 2 of 2; 0 rounds left after this one.] This is the last round: write the <deliverable> "
        "now with what you have."
    )


def test_one_round_budget_asks_for_the_deliverable_at_once() -> None:
    model = ScriptedModelService(["<deliverable>quick</deliverable>"])
    outcome = MonoModelReasoner(model).run(Task(goal="G", max_rounds=1))
    assert (outcome.status, outcome.deliverable) == ("completed", "quick")
    assert "This is the last round" in last_user(model, 0)


# -- failures -------------------------------------------------------------------------------------


def test_a_failing_thinker_fails_the_run_and_keeps_the_messages() -> None:
    thinker = ScriptedModelService(
        [instruct("go"), ModelCallError("host gpu-1 is down", model="t")], name="t"
    )
    actor = ScriptedModelService([acting(fc("add", {"a": 1, "b": 2}))], name="a")
    outcome = DualModelReasoner(thinker, actor).run(Task(goal="G", tools=TOOLS))

    assert outcome.status == "failed"
    assert outcome.error == "ModelCallError: host gpu-1 is down"
    assert outcome.deliverable == ""
    assert [(m.round, m.role) for m in outcome.messages] == [(0, "thinker"), (0, "actor"), (0, "tool")]
    assert outcome.usage.calls == 2


def test_a_failing_mono_model_fails_the_run() -> None:
    model = ScriptedModelService([ModelCallError("rate limited", model="m")])
    outcome = MonoModelReasoner(model).run(Task(goal="G"))
    assert (outcome.status, outcome.error, outcome.messages, outcome.rounds) == (
        "failed",
        "ModelCallError: rate limited",
        [],
        0,
    )


def test_running_out_of_script_is_a_model_failure() -> None:
    outcome = MonoModelReasoner(ScriptedModelService(["<action>1</action>"])).run(Task(goal="G"))
    assert outcome.status == "failed"
    assert "has no reply left" in str(outcome.error)
    assert len(outcome.messages) == 1


# -- infer, conclude, stopped, memory, hooks ------------------------------------------------------------


def test_infer_returns_the_deliverable() -> None:
    thinker, actor = dual_models()
    assert DualModelReasoner(thinker, actor).infer(Task(goal="G", tools=TOOLS)) == "The sum is 8."
    assert MonoModelReasoner(mono_model()).infer(Task(goal="G", tools=TOOLS)) == "The sum is 8."


def test_infer_raises_when_the_run_fails() -> None:
    reasoner = MonoModelReasoner(ScriptedModelService([ModelCallError("down")]))
    with pytest.raises(ReasonerError, match="ModelCallError: down"):
        reasoner.infer(Task(goal="G"))


def test_conclude_and_stopped() -> None:
    reasoner = MonoModelReasoner(ScriptedModelService([]))
    memory = InMemoryReasonerMemory([ModelMessage(role="actor", content="<deliverable>42</deliverable>")])
    assert reasoner.conclude(memory) == "42"
    assert DualModelReasoner.stopped(ModelMessage(role="actor", content="x <deliverable>y</deliverable>"))
    assert not Reasoner.stopped(
        ModelMessage(role="actor", content="<think><deliverable>y</deliverable></think>")
    )
    assert not reasoner.stopped(ModelMessage(role="actor", content="no deliverable yet"))


def test_a_run_can_use_redis_memory() -> None:
    redis = fakeredis.FakeRedis()
    memory = RedisReasonerMemory(redis, "job-r")
    thinker, actor = dual_models()
    outcome = DualModelReasoner(thinker, actor).run(Task(goal="G", tools=TOOLS), memory)
    assert outcome.status == "completed"
    assert RedisReasonerMemory(redis, "job-r").get_messages() == outcome.messages


def test_the_runner_given_is_used() -> None:
    def long_text() -> str:
        """A long text."""
        return "y" * 500

    model = ScriptedModelService([acting(fc("long_text", {})), "<deliverable>ok</deliverable>"])
    reasoner = MonoModelReasoner(model, runner=ToolRunner(max_output_chars=50))
    outcome = reasoner.run(Task(goal="G", tools=[Tool.from_function(long_text)]))
    assert "[output cut: showing the first 50 of 500 characters]" in tool_message(outcome, 0).content


def test_only_allowed_tools_are_offered_and_run() -> None:
    model = ScriptedModelService([acting(fc("explode", {"reason": "x"})), "<deliverable>ok</deliverable>"])
    outcome = MonoModelReasoner(model).run(Task(goal="G", tools=TOOLS, allowed_tools=["add"]))
    (result,) = tool_message(outcome, 0).function_results
    assert result.output == "There is no tool named 'explode'. Valid tool names: add."
    assert "explode" not in model.calls[0]["sys_prompt"]


class Recorder(ReasonerHooks):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def round_started(self, round_no: int, max_rounds: int) -> None:
        self.events.append(("round", round_no, max_rounds))

    def model_replied(self, message: ModelMessage) -> None:
        self.events.append(("reply", message.round, message.role))

    def tool_called(self, round_no: int, index: int, call: ParsedFunctionCall) -> None:
        self.events.append(("call", round_no, index, call.name))

    def tool_returned(self, round_no: int, result: FunctionCallResult) -> None:
        self.events.append(("result", round_no, result.index, result.status.value))

    def finished(self, outcome: ReasonerOutcome) -> None:
        self.events.append(("finished", outcome.status))


def test_hooks_see_every_step_in_order() -> None:
    hooks = Recorder()
    model = ScriptedModelService(
        [acting(fc("add", {"a": 1, "b": 2}), fc("nope", {})), "<deliverable>3</deliverable>"]
    )
    MonoModelReasoner(model, hooks=hooks).run(Task(goal="G", tools=TOOLS, max_rounds=4))
    assert hooks.events == [
        ("round", 0, 4),
        ("reply", 0, "actor"),
        ("call", 0, 1, "add"),
        ("call", 0, 2, "nope"),
        ("result", 0, 1, "succeeded"),
        ("result", 0, 2, "failed"),
        ("round", 1, 4),
        ("reply", 1, "actor"),
        ("finished", "completed"),
    ]


def test_hooks_hear_of_a_failed_run() -> None:
    hooks = Recorder()
    MonoModelReasoner(ScriptedModelService([ModelCallError("down")]), hooks=hooks).run(Task(goal="G"))
    assert hooks.events == [("round", 0, 10), ("finished", "failed")]
