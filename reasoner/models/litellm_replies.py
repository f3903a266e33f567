"""Reading a LiteLLM reply: the reasoning parser, raw host bodies, streamed tool-call deltas,
prompt-mode calls written while thinking, usage.

The pieces of ``LiteLlmModelService`` that turn what a host sent into ``ModelMessage`` parts; no
request is made here and LiteLLM is not imported.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.messages import NativeToolCall, Usage

if TYPE_CHECKING:
    from tandem.reasoner.parsing.base import ReasoningParser


def resolve_parser(parser: str | ReasoningParser | None) -> ReasoningParser:
    """The reasoning parser named ``parser`` (``None``: ``"think"``), or ``parser`` itself when it
    is an object with ``parse()`` and ``stream()``."""
    from tandem.reasoner.parsing import get_reasoning_parser

    if parser is None:
        return get_reasoning_parser("think")
    if isinstance(parser, str):
        return get_reasoning_parser(parser)
    if not (callable(getattr(parser, "parse", None)) and callable(getattr(parser, "stream", None))):
        raise ConfigurationError(
            f"reasoning_parser must be a parser name or an object with parse() and stream(), not {parser!r}"
        )
    return parser


def calls_from_reasoning(reasoning: str, content: str) -> str:
    """The text to append to ``content``: the ``<function_call>`` blocks found in ``reasoning``
    that read cleanly (reasoning holds drafts, and a draft's broken block is no request)."""
    if "<function_call>" not in reasoning:
        return ""
    from tandem.reasoner.function_calling import parse_function_calls

    blocks = [f"<function_call>{c.raw}</function_call>" for c in parse_function_calls(reasoning) if c.ok]
    if not blocks:
        return ""
    separator = "\n" if content and not content.endswith("\n") else ""
    return separator + "\n".join(blocks)


def new_call_id() -> str:
    """A fresh OpenAI-style tool-call id for calls the host sent without one."""
    return f"call_{uuid.uuid4().hex[:24]}"


def parsed_tool_call(call: Any) -> NativeToolCall:
    """A parser's in-band tool call (an object or a dict with ``name``, ``arguments``, maybe ``id``)."""
    get = call.get if isinstance(call, Mapping) else lambda key, default=None: getattr(call, key, default)
    arguments = get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return NativeToolCall(id=get("id", None) or new_call_id(), name=str(get("name", "")), arguments=arguments)


class ToolCallAccumulator:
    """Streamed tool-call deltas joined by ``index`` (id and name from the first delta that has them)."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}
        self._last: int | None = None

    def add(self, delta_calls: Iterable[Any]) -> None:
        for call in delta_calls:
            index = getattr(call, "index", None)
            call_id = getattr(call, "id", None)
            if index is None:  # a host that omits the index: a new id starts a new call
                if self._last is None or (call_id and self._calls[self._last]["id"] not in ("", call_id)):
                    index = len(self._calls)
                else:
                    index = self._last
            entry = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            self._last = index
            function = getattr(call, "function", None)
            if call_id and not entry["id"]:
                entry["id"] = call_id
            name = getattr(function, "name", None)
            if name and not entry["name"]:
                entry["name"] = name
            arguments = getattr(function, "arguments", None)
            if arguments:
                entry["arguments"] += arguments

    def calls(self) -> list[NativeToolCall]:
        return [
            NativeToolCall(id=c["id"] or new_call_id(), name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(self._calls.items())
        ]


def raw_message(body: str) -> tuple[str, str] | None:
    """``(content, reasoning)`` exactly as an OpenAI-compatible host sent them; ``None`` if unsure.

    LiteLLM moves a leading ``<think>…</think>`` of a non-streamed reply's content into
    ``reasoning_content`` itself (it does not for streams, and not under the configured parser's
    rules), so the host's own JSON, which LiteLLM hands to ``logger_fn`` as
    ``original_response``, is read instead. Any other shape falls back to LiteLLM's fields.
    """
    try:
        data = json.loads(body)
        message = data["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return message_text(message)


def message_text(message: Any) -> tuple[str, str] | None:
    """``(content, reasoning)`` of a chat completion's ``message`` object as the host wrote it;
    ``None`` when it is not of the expected shape."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return None
    reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
    if not isinstance(reasoning, str):
        return None
    return content or "", reasoning


def host_reported_usage(stream: Any) -> bool:
    """Whether the host sent usage, not LiteLLM's token estimate of the stream.

    LiteLLM ends a stream requested with ``include_usage`` by a chunk carrying usage even
    when the host sent none (it counts tokens itself). The chunks it received from the host
    (``CustomStreamWrapper.chunks``) show whether any carried usage; if that attribute is
    missing (another LiteLLM version) the reported usage is trusted.
    """
    received = getattr(stream, "chunks", None)
    if not isinstance(received, list):
        return True
    return any(getattr(chunk, "usage", None) for chunk in received)


def usage_of(usage: Any) -> Usage:
    """The ``Usage`` of one call from a host's usage object or dict (missing counts are 0)."""

    def count(name: str) -> int:
        value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
        try:
            return int(value or 0)
        except (TypeError, ValueError):
            return 0

    if usage is None:
        return Usage(calls=1)
    prompt, completion = count("prompt_tokens"), count("completion_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=count("total_tokens") or prompt + completion,
        calls=1,
    )
