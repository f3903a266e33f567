"""The messages a reasoning job keeps: model replies, tool results and token usage.

Everything here is a pydantic model because it crosses Redis as JSON between Celery tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from tandem.toolkit.artifacts import ArtifactRef

Role = Literal["thinker", "actor", "tool", "person", "summary"]
"""Who wrote a message: the Thinker model, the Actor model (also mono and ReAct), the tools, the
person who set the task (a message sent into the running job: ``tandem.message``), or a summary of
earlier rounds that a role's requests read in their place (``SummaryOf``)."""


class Usage(BaseModel):
    """Token usage summed over one or more model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    """Price of the calls in US dollars from LiteLLM's local cost map (0 for models it does not
    price, such as self-hosted ones)."""
    counted_calls: int = 0
    """Of ``calls``, those whose host reported no usage (a stream from a host that ignores
    ``stream_options.include_usage``): their tokens are tandem's own count, by the host's tokenizer
    or an estimate (``tandem.reasoner.models.token_count``), not the host's. 0: every count is the
    host's own."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            calls=self.calls + other.calls,
            cost_usd=self.cost_usd + other.cost_usd,
            counted_calls=self.counted_calls + other.counted_calls,
        )


class FunctionCallStatus(StrEnum):
    """Outcome of one tool call."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class FunctionCallResult(BaseModel):
    """The result of one tool call, numbered in the order the model wrote the calls (from 1)."""

    index: int
    name: str
    call_objective: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    status: FunctionCallStatus
    output: str
    call_id: str | None = None
    """The id of a native tool call (ReAct); ``None`` for ``<function_call>`` blocks."""
    return_direct: bool = False
    """The tool asked for its result to end the run (ReAct)."""
    artifact: ArtifactRef | None = None
    """Where the whole output is kept when it was over the artifact threshold (``output`` is then
    its preview): ``tandem.toolkit.artifacts``. ``None`` for an output shown whole (or cut)."""
    usage: Usage = Field(default_factory=Usage)
    """What the child jobs this call started spent (on workers: the sum of the ended children's
    ``JobResult.usage``, their own children's included), attached by the framework whatever the
    tool returned; counted in the round's ``tool`` message, so in the job's usage and budgets.
    Empty for a call that started no child job."""

    def to_prompt(self) -> str:
        """Render the result as the ``<function_call_result>`` block the models read."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        lines = [
            "<function_call_result>",
            f"call {self.index}: {self.name}({args})",
            f"status: {self.status.value}",
        ]
        if self.call_objective:
            lines.append(f"objective: {self.call_objective}")
        lines += ["output:", self.output, "</function_call_result>"]
        return "\n".join(lines)


class NativeToolCall(BaseModel):
    """A tool call requested through the provider's native ``tool_calls`` field."""

    id: str
    name: str
    arguments: str = "{}"
    """The arguments exactly as the model sent them (JSON text, possibly invalid)."""


class SummaryOf(BaseModel):
    """What a ``summary`` entry of the memory stands for: rounds ``first`` to ``last`` (from 0) of
    ``role``'s view, in ``tokens`` (its text's count). ``how``: ``summarized`` by a model, or
    ``dropped`` (summarizing failed: the text is a marker saying what was left out). ``since``:
    the first round this entry read itself (the rounds before it came through the previous
    entry's text), so no round is ever read by two summaries."""

    role: Literal["thinker", "actor"]
    first: int
    last: int
    since: int
    tokens: int
    how: Literal["summarized", "dropped"] = "summarized"
    summarized_to: int = -1
    """The last round a summary's text stands for; the rounds after it up to ``last`` are left
    out with a marker (a ``dropped`` entry; -1: no summary under it)."""


class ModelMessage(BaseModel):
    """One entry of a job's memory: a model reply or the results of a round's tool calls.

    ``(round, role)`` identifies a message within a job; writing the same key twice keeps the
    first, which is what makes a redelivered step harmless.
    """

    role: Role
    content: str
    round: int = 0
    reasoning: str = ""
    """Thinking text split from the answer; stored and shown, never sent back to a model."""
    tool_calls: list[NativeToolCall] = Field(default_factory=list)
    function_results: list[FunctionCallResult] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    model: str | None = None
    message_id: str | None = None
    """The id of a person's message (role ``person``): several may share a round."""
    summary: SummaryOf | None = None
    """A ``summary`` entry's span (its ``round`` is the last round it stands for)."""

    @property
    def key(self) -> str:
        """The idempotency key of this message within its job (``round:role``; a person's message
        adds its id, since a round may get several; a summary its view's role)."""
        if self.role == "person":
            return f"{self.round}:person:{self.message_id}"
        if self.role == "summary":
            return f"{self.round}:summary:{self.summary.role if self.summary else 'actor'}"
        return f"{self.round}:{self.role}"


def total_usage(messages: Sequence[ModelMessage]) -> Usage:
    """Token usage summed over ``messages`` (a ``tool`` message's holds what the child jobs its
    calls started spent)."""
    usage = Usage()
    for m in messages:
        usage = usage + m.usage
    return usage


def calls_usage(results: Sequence[FunctionCallResult]) -> Usage:
    """The usage of tool call ``results`` summed: what the child jobs they started spent."""
    usage = Usage()
    for r in results:
        usage = usage + r.usage
    return usage


def children_usage(messages: Sequence[ModelMessage]) -> Usage:
    """Of ``total_usage(messages)``, what the child jobs started by the messages' tool calls spent."""
    return calls_usage([r for m in messages for r in m.function_results])
