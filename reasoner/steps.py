"""The reasoning loop as step functions over a memory.

Both drivers call these: the in-process reasoners run them in a ``for`` loop, and the Celery
tasks run one step per task. A step first looks for its stored result, so running a step twice
(a redelivered task) returns the stored message instead of calling the model again.

A round is: ``thinker_step`` (dual only), ``actor_step``, then ``plan_next`` decides whether the
job delivers, runs tools (whose results ``apply_tool_results`` stores), goes on, or is out of rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tandem.reasoner.errors import MemoryLimitError
from tandem.reasoner.function_calling import (
    ParsedFunctionCall,
    extract_tag,
    parse_function_calls,
    strip_thinking,
)
from tandem.reasoner.hooks import NO_HOOKS, ReasonerHooks, streaming_listener
from tandem.reasoner.memory import ReasonerMemory
from tandem.reasoner.messages import FunctionCallResult, ModelMessage, NativeToolCall, Usage
from tandem.reasoner.model_service import ChatMessage, DeltaListener, ModelRequest, ModelService
from tandem.reasoner.prompts import actor_prompt, mono_prompt, round_note, task_text, thinker_prompt
from tandem.reasoner.task import ReasonerOutcome, Task
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

if TYPE_CHECKING:
    from tandem.toolkit.action import Action

Mode = Literal["dual", "mono"]
NextKind = Literal["deliver", "tools", "continue", "truncated"]


@dataclass
class NextStep:
    """What follows an Actor reply: deliver, run ``calls``, go to the next round, or stop."""

    kind: NextKind
    calls: list[ParsedFunctionCall] = field(default_factory=list)


def _merge(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Join consecutive messages of the same role: strict chat templates want them alternating."""
    merged: list[ChatMessage] = []
    for m in messages:
        if merged and merged[-1]["role"] == m["role"]:
            merged[-1] = {"role": m["role"], "content": f"{merged[-1]['content']}\n\n{m['content']}"}
        else:
            merged.append(dict(m))
    return merged


def tool_results_text(results: Sequence[FunctionCallResult]) -> str:
    """The ``<function_call_result>`` blocks of a round, in call order."""
    return "\n\n".join(r.to_prompt() for r in results)


def _instruction_text(content: str) -> str:
    instruction = extract_tag(content, "instruction")
    if instruction is None:
        return strip_thinking(content).strip()
    text = f"<instruction>{instruction}</instruction>"
    given = extract_tag(content, "input")
    if given:
        text += f"\n<input>{given}</input>"
    return text


def thinker_view(task: Task, history: Sequence[ModelMessage], round_no: int) -> list[ChatMessage]:
    """The conversation as the Thinker sees it before its turn in ``round_no``."""
    chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
    for m in history:
        if m.round >= round_no:
            break
        if m.role == "thinker":
            chat.append({"role": "assistant", "content": m.content})
        elif m.role == "actor":
            chat.append(
                {"role": "user", "content": f"The Actor replied:\n{strip_thinking(m.content).strip()}"}
            )
        else:
            chat.append({"role": "user", "content": m.content})
    chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "thinker")})
    return _merge(chat)


def actor_view(task: Task, history: Sequence[ModelMessage], round_no: int, mode: Mode) -> list[ChatMessage]:
    """The conversation as the Actor (or the mono model) sees it before its turn in ``round_no``."""
    chat: list[ChatMessage] = [{"role": "user", "content": task_text(task.goal, task.context)}]
    for m in history:
        if m.round > round_no or (m.round == round_no and m.role != "thinker"):
            break
        if m.role == "thinker":
            if m.round == round_no:
                chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "actor")})
            chat.append(
                {"role": "user", "content": f"The Thinker's instruction:\n{_instruction_text(m.content)}"}
            )
        elif m.role == "actor":
            chat.append({"role": "assistant", "content": m.content})
        else:
            chat.append({"role": "user", "content": m.content})
    if mode == "mono":
        chat.append({"role": "user", "content": round_note(round_no, task.max_rounds, "actor")})
    return _merge(chat)


def _store(
    memory: ReasonerMemory, reply: ModelMessage, round_no: int, role: Literal["thinker", "actor"]
) -> tuple[ModelMessage, bool]:
    message = reply.model_copy(update={"role": role, "round": round_no})
    stored = memory.add_message(message)
    # A concurrent duplicate may have stored first: the stored message is the truth.
    return memory.get_message(round_no, role) or message, stored


def check_memory_size(task: Task, history: Sequence[ModelMessage]) -> None:
    """``MemoryLimitError`` when ``history`` (as JSON) is over ``task.max_memory_bytes``."""
    limit = task.max_memory_bytes
    if not limit:
        return
    size = 0
    for message in history:
        size += len(message.model_dump_json().encode("utf-8", "surrogatepass"))
        if size > limit:
            raise MemoryLimitError(
                f"the job's memory is over {limit} bytes (limit Task.max_memory_bytes, "
                "TANDEM_MAX_MEMORY_BYTES on workers): the job stops here and its memory is kept; "
                "split the work into smaller jobs or raise the limit"
            )


def thinker_request(
    task: Task, memory: ReasonerMemory, round_no: int, tools: Sequence[Tool] = ()
) -> ModelRequest:
    """What the Thinker is sent in ``round_no``: its system prompt and its view of the memory;
    ``MemoryLimitError`` when the memory is over ``task.max_memory_bytes``."""
    history = memory.get_messages()
    check_memory_size(task, history)
    return ModelRequest(thinker_prompt(tools), thinker_view(task, history, round_no))


def actor_request(
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: Sequence[Tool] = (),
    actions: Sequence[Action] = (),
    mode: Mode = "dual",
) -> ModelRequest:
    """What the Actor (or the mono model) is sent in ``round_no``; ``MemoryLimitError`` as
    ``thinker_request``."""
    prompt_fn = actor_prompt if mode == "dual" else mono_prompt
    history = memory.get_messages()
    check_memory_size(task, history)
    return ModelRequest(prompt_fn(tools, actions, task.toolkit), actor_view(task, history, round_no, mode))


def record_reply(
    memory: ReasonerMemory,
    reply: ModelMessage,
    round_no: int,
    role: Literal["thinker", "actor"],
    hooks: ReasonerHooks = NO_HOOKS,
) -> ModelMessage:
    """Store a model's reply as ``(round_no, role)`` and return the stored message (the first
    stored wins; ``hooks.model_replied`` is called only by the caller that stored it)."""
    message, stored = _store(memory, reply, round_no, role)
    if stored:
        hooks.model_replied(message)
    return message


def thinker_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: Sequence[Tool] = (),
    *,
    hooks: ReasonerHooks = NO_HOOKS,
    on_delta: DeltaListener | None = None,
) -> ModelMessage:
    """The Thinker's turn in ``round_no``: returns the stored message, calling the model only once."""
    existing = memory.get_message(round_no, "thinker")
    if existing is not None:
        return existing
    request = thinker_request(task, memory, round_no, tools)
    listener = streaming_listener(hooks, round_no, "thinker", on_delta)
    try:
        reply = model.generate(request.sys_prompt, request.messages, on_delta=listener)
    finally:
        hooks.model_streamed(round_no, "thinker")
    return record_reply(memory, reply, round_no, "thinker", hooks)


def actor_step(
    model: ModelService,
    task: Task,
    memory: ReasonerMemory,
    round_no: int,
    tools: Sequence[Tool] = (),
    actions: Sequence[Action] = (),
    *,
    mode: Mode = "dual",
    hooks: ReasonerHooks = NO_HOOKS,
    on_delta: DeltaListener | None = None,
) -> ModelMessage:
    """The Actor's (or mono model's) turn in ``round_no``; returns the stored message."""
    existing = memory.get_message(round_no, "actor")
    if existing is not None:
        return existing
    request = actor_request(task, memory, round_no, tools, actions, mode)
    listener = streaming_listener(hooks, round_no, "actor", on_delta)
    try:
        reply = model.generate(request.sys_prompt, request.messages, on_delta=listener)
    finally:
        hooks.model_streamed(round_no, "actor")
    return record_reply(memory, reply, round_no, "actor", hooks)


def stopped(message: ModelMessage) -> bool:
    """True when the reply holds a ``<deliverable>`` outside thinking sections."""
    return extract_tag(message.content, "deliverable") is not None


def plan_next(task: Task, message: ModelMessage, round_no: int) -> NextStep:
    """Decide what follows the Actor's reply in ``round_no``.

    A deliverable ends the job; tool calls run unless this was the last round; otherwise the
    next round starts, or the job is ``truncated`` when the rounds are spent.
    """
    if stopped(message):
        return NextStep("deliver")
    last = round_no + 1 >= task.max_rounds
    if last:
        return NextStep("truncated")
    calls = parse_function_calls(message.content)
    if calls:
        return NextStep("tools", calls)
    return NextStep("continue")


def native_to_call(call: NativeToolCall) -> ParsedFunctionCall:
    """A native tool call as a ``ParsedFunctionCall`` (``error`` set when its arguments are not a
    JSON object)."""
    import json

    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        return ParsedFunctionCall(
            name=call.name,
            call_objective="",
            args={},
            raw=call.arguments,
            error=f"the arguments of {call.name!r} are not valid JSON ({exc.msg} at position {exc.pos}); "
            "send a JSON object",
        )
    if not isinstance(args, dict):
        return ParsedFunctionCall(
            name=call.name,
            call_objective="",
            args={},
            raw=call.arguments,
            error=f"the arguments of {call.name!r} must be a JSON object, got {type(args).__name__}",
        )
    return ParsedFunctionCall(name=call.name, call_objective="", args=args, raw=call.arguments)


def calls_of(message: ModelMessage) -> list[ParsedFunctionCall]:
    """The tool calls a reply asks for: its native ``tool_calls`` if any, else its
    ``<function_call>`` blocks. The ``run_tool`` tasks read their call from here."""
    if message.tool_calls:
        return [native_to_call(c) for c in message.tool_calls]
    return parse_function_calls(message.content)


def tool_context(task: Task, round_no: int) -> ToolCallContext:
    """The context injected into the tools of ``round_no``."""
    return ToolCallContext(
        job_id=task.job_id,
        round=round_no,
        role="actor",
        metadata=dict(task.metadata),
        secrets=dict(task.secrets),
    )


def apply_tool_results(
    memory: ReasonerMemory, round_no: int, results: Sequence[FunctionCallResult]
) -> ModelMessage:
    """Store the round's tool results (in call order) as one ``tool`` message; idempotent."""
    ordered = sorted(results, key=lambda r: r.index)
    message = ModelMessage(
        role="tool", round=round_no, content=tool_results_text(ordered), function_results=ordered
    )
    memory.add_message(message)
    return memory.get_message(round_no, "tool") or message


def conclude(memory: ReasonerMemory) -> str:
    """The deliverable of the last Actor reply, or that reply's visible text when it has none."""
    for message in reversed(memory.get_messages()):
        if message.role == "actor":
            found = extract_tag(message.content, "deliverable")
            return found if found is not None else strip_thinking(message.content).strip()
    return ""


def total_usage(messages: Sequence[ModelMessage]) -> Usage:
    """Token usage summed over the model messages."""
    usage = Usage()
    for m in messages:
        usage = usage + m.usage
    return usage


def make_outcome(
    memory: ReasonerMemory, status: Literal["completed", "truncated", "failed"], error: str | None = None
) -> ReasonerOutcome:
    """The outcome of a run from what its memory holds."""
    messages = memory.get_messages()
    rounds = max((m.round for m in messages), default=-1) + 1
    deliverable = conclude(memory) if status == "completed" else ""
    if status == "truncated" and error is None:
        error = "the round budget (max_rounds) ran out before the Actor wrote a <deliverable>"
    return ReasonerOutcome(
        status=status,
        deliverable=deliverable,
        rounds=rounds,
        messages=messages,
        usage=total_usage(messages),
        error=error,
    )
