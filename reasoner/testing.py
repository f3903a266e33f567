"""Test doubles shipped with the package: a scripted model that needs no network.

``ScriptedModelService`` replies from a list, or from a function of the conversation, and goes
through the same reasoning split and tool-call path as a real model service.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from tandem.reasoner.context.budget import ContextBudget, make_budget
from tandem.reasoner.context.counting import ESTIMATE, Tokenizer
from tandem.reasoner.errors import ModelCallError
from tandem.reasoner.messages import ModelMessage, NativeToolCall, Usage
from tandem.reasoner.models.model_service import BaseModelService, ChatMessage, DeltaListener
from tandem.reasoner.tool_runner import ToolRunner
from tandem.toolkit.context import ToolCallContext
from tandem.toolkit.tool import Tool

Reply = str | ModelMessage | Exception
"""A scripted reply: text (thinking in ``<think>`` tags is split off), a full message, or an
exception to raise (to script a failing host)."""

ReplyFunction = Callable[[str, list[ChatMessage]], Reply]


class ScriptedModelService(BaseModelService):
    """A model whose replies are scripted.

    ``replies`` is a list used in order (running past its end raises ``ModelCallError``) or a
    function ``(sys_prompt, messages) -> reply``. Each call is recorded in ``calls`` as a dict
    with ``sys_prompt``, ``messages`` and ``tools``. Usage is estimated at four characters a token.
    Thread-safe, so it can stand in for a host shared by parallel jobs.

    With ``context_tokens``, the model has a context budget (``context_budget``): the reasoners
    keep every request within it (``tandem.reasoner.context``).

    With ``stream_chunk``, a text reply reaches ``on_delta`` in pieces of that many characters
    (``stream_delay`` seconds apart), split by the reasoning parser's stream as a streaming
    host's would be; otherwise ``on_delta`` gets the whole reply once.
    """

    def __init__(
        self,
        replies: Sequence[Reply] | ReplyFunction,
        *,
        name: str = "scripted",
        reasoning_parser: str = "think",
        tool_runner: ToolRunner | None = None,
        stream_chunk: int | None = None,
        stream_delay: float = 0.0,
        context_tokens: int | None = None,
        reply_reserve: int | None = None,
        tokenizer: Tokenizer | None = None,
        role: str = "actor",
    ) -> None:
        super().__init__(tool_runner)
        self.context_tokens = context_tokens
        self.reply_reserve = reply_reserve
        self.tokenizer: Tokenizer = tokenizer or ESTIMATE
        self.role = role
        """The role errors name (``TANDEM_<ROLE>_CONTEXT_TOKENS``)."""
        self.stream_chunk = stream_chunk
        self.stream_delay = stream_delay
        self.name = name
        self._replies = replies
        self._parser_name = reasoning_parser
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []

    def context_budget(self) -> ContextBudget | None:
        """The budget of a ``context_tokens`` window (``None``: no budget), ``reply_reserve``
        tokens kept for the reply (a quarter of the window by default), counted by ``tokenizer``
        (the conservative estimate by default)."""
        return make_budget(
            self.context_tokens,
            "setting",
            reply_reserve=self.reply_reserve,
            tokenizer=self.tokenizer,
            role=self.role,
        )

    def _next_reply(self, sys_prompt: str, messages: list[ChatMessage]) -> Reply:
        with self._lock:
            self.calls.append({"sys_prompt": sys_prompt, "messages": messages, "tools": None})
            used = len(self.calls)
        if callable(self._replies):
            return self._replies(sys_prompt, messages)
        if used > len(self._replies):
            raise ModelCallError(
                f"scripted model {self.name!r} has no reply left: {len(self._replies)} scripted, "
                f"call {used} asked for one more",
                model=self.name,
            )
        return self._replies[used - 1]

    def _stream(self, text: str, on_delta: DeltaListener) -> None:
        from tandem.reasoner.parsing import get_reasoning_parser

        stream = get_reasoning_parser(self._parser_name).stream()
        size = max(1, self.stream_chunk or 1)
        for start in range(0, len(text), size):
            if start and self.stream_delay:
                time.sleep(self.stream_delay)
            delta = stream.feed(text[start : start + size])
            if delta.reasoning or delta.content:
                on_delta(delta.reasoning, delta.content)
        tail = stream.finish()
        if tail.reasoning or tail.content:
            on_delta(tail.reasoning, tail.content)

    def generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """The next scripted reply, as a model message (role ``actor``, round 0)."""
        return self._generate(sys_prompt, messages, tools, on_delta)

    async def agenerate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None = None,
        tool_call_ctx: ToolCallContext | None = None,
        on_delta: DeltaListener | None = None,
    ) -> ModelMessage:
        """``generate`` for asyncio (a script needs no I/O: it yields to the loop once)."""
        await asyncio.sleep(0)
        return self._generate(sys_prompt, messages, tools, on_delta)

    def _generate(
        self,
        sys_prompt: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[Tool] | None,
        on_delta: DeltaListener | None,
    ) -> ModelMessage:
        chat = [dict(m) for m in messages]
        reply = self._next_reply(sys_prompt, chat)
        if tools is not None:
            with self._lock:
                self.calls[-1]["tools"] = [t.name for t in tools]
        if isinstance(reply, Exception):
            raise reply
        prompt_chars = len(sys_prompt) + sum(len(str(m.get("content") or "")) for m in chat)
        if isinstance(reply, ModelMessage):
            message = reply
        else:
            from tandem.reasoner.parsing import get_reasoning_parser

            split = get_reasoning_parser(self._parser_name).parse(reply)
            message = ModelMessage(
                role="actor",
                content=split.content,
                reasoning=split.reasoning,
                tool_calls=[
                    NativeToolCall(id=f"call_{i}", name=c["name"], arguments=c["arguments"])
                    for i, c in enumerate(getattr(split, "tool_calls", []) or [])
                ],
            )
        usage = Usage(
            prompt_tokens=prompt_chars // 4,
            completion_tokens=(len(message.content) + len(message.reasoning)) // 4,
            calls=1,
        )
        usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        if on_delta is not None and isinstance(reply, str) and self.stream_chunk:
            self._stream(reply, on_delta)
        elif on_delta is not None:
            on_delta(message.reasoning, message.content)
        return message.model_copy(update={"usage": usage, "model": self.name})
