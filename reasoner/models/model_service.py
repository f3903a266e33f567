"""``ModelService``: the one seam between the reasoners and a language model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tandem.reasoner.messages import FunctionCallResult, ModelMessage

if TYPE_CHECKING:  # kept out of the import path: the toolkit is not needed to define the seam
    from tandem.reasoner.tool_runner import ToolRunner
    from tandem.toolkit.context import ToolCallContext
    from tandem.toolkit.tool import Tool

ChatMessage = dict[str, Any]
"""An OpenAI-style chat message: ``{"role": "user"|"assistant"|"tool", "content": str, ...}``."""

DeltaListener = Callable[[str, str], None]
"""Called while a reply streams in, with ``(reasoning_delta, content_delta)``."""


@runtime_checkable
class ModelService(Protocol):
    """A language model the reasoners can call.

    ``generate`` sends a system prompt and chat messages; with ``tools`` it uses the provider's
    native tool calling and the reply carries ``tool_calls``. Without ``tools`` the reasoners
    describe tools in the prompt and read ``<function_call>`` blocks with ``call_function``.
    The reply's ``reasoning`` holds the model's thinking, apart from ``content``.

    A service may also offer ``async def agenerate(...)`` with the same arguments and result
    (``AsyncModelService``): the reasoners' ``arun``/``ainfer`` await it, so one event loop
    drives many jobs. ``LiteLlmModelService`` (``litellm.acompletion``) and
    ``ScriptedModelService`` do; a service without it is called in a worker thread there.
    """

    name: str
    """A label for logs and errors, such as the LiteLLM model string."""

    def generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """Call the model once and return its reply (role ``actor``, round 0: callers set them)."""
        ...

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Run the ``<function_call>`` blocks of a reply; ``None`` when it holds none."""
        ...


@runtime_checkable
class AsyncModelService(Protocol):
    """A ``ModelService`` that can also be awaited (see ``ModelService``)."""

    name: str

    async def agenerate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """``generate`` for asyncio: the same request and reply, without blocking the loop."""
        ...


@dataclass(frozen=True)
class ModelRequest:
    """One model call a step is about to make: system prompt, chat messages, native tools."""

    sys_prompt: str
    messages: list[ChatMessage]
    tools: list[Tool] | None = None


async def agenerate(
    model: ModelService,
    request: ModelRequest,
    on_delta: DeltaListener | None = None,
) -> ModelMessage:
    """Await ``model``'s reply to ``request``: its ``agenerate`` when it has one, else its
    ``generate`` in a worker thread (so a sync-only service still does not block the loop)."""
    if isinstance(model, AsyncModelService):
        return await model.agenerate(
            request.sys_prompt, request.messages, tools=request.tools, on_delta=on_delta
        )
    return await asyncio.to_thread(
        model.generate, request.sys_prompt, request.messages, tools=request.tools, on_delta=on_delta
    )


class BaseModelService:
    """Shared part of the model services: prompt-mode tool calls through a ``ToolRunner``."""

    name: str = "model"

    def __init__(self, tool_runner: ToolRunner | None = None) -> None:
        self._tool_runner = tool_runner

    @property
    def tool_runner(self) -> ToolRunner:
        """The runner that executes ``<function_call>`` blocks (a default one if none was given)."""
        if self._tool_runner is None:
            from tandem.reasoner.tool_runner import ToolRunner

            self._tool_runner = ToolRunner()
        return self._tool_runner

    def call_function(
        self,
        tools: Sequence[Tool],
        model_response_text: str,
        tool_call_ctx: ToolCallContext | None = None,
    ) -> list[FunctionCallResult] | None:
        """Run the ``<function_call>`` blocks of a reply; ``None`` when it holds none."""
        return self.tool_runner.call_function(tools, model_response_text, tool_call_ctx)
