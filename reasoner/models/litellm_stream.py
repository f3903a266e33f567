"""Reading a streamed LiteLLM reply: deltas for the listener, then the reply's parts.

``StreamReader`` is fed the chunks of one stream, sync or async alike (only how chunks are
fetched differs between ``LiteLlmModelService.generate`` and ``agenerate``). No request is made
here and LiteLLM is not imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tandem.reasoner.messages import NativeToolCall, Usage
from tandem.reasoner.models.direct_http import ChatStream, UnreadableReply
from tandem.reasoner.models.litellm_errors import is_call_failure
from tandem.reasoner.models.litellm_replies import (
    ToolCallAccumulator,
    host_reported_usage,
    parsed_tool_call,
    usage_of,
)

if TYPE_CHECKING:
    from tandem.reasoner.models.model_service import DeltaListener
    from tandem.reasoner.parsing.base import ReasoningParser


class PartialStreamError(Exception):
    """A stream failed after part of the reply reached the listener (not retryable here)."""

    def __init__(self, cause: BaseException, delivered: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.delivered = delivered


def body_keeper(raw_bodies: list[str]) -> Callable[[Mapping[str, Any]], None]:
    """A LiteLLM ``logger_fn`` that keeps the host's first raw response body in ``raw_bodies``."""

    def keep_raw_body(details: Mapping[str, Any]) -> None:
        body = details.get("original_response")
        if isinstance(body, str) and not raw_bodies:
            raw_bodies.append(body)

    return keep_raw_body


class StreamReader:
    """Turns a stream's chunks into ``(reasoning, content)`` deltas for the listener and, at the
    end, the reply's content, reasoning, tool calls and usage.

    Reasoning deltas from the host switch the content to pass-through only if they come before
    any content; otherwise ``parser`` splits the content. ``calls_from_reasoning(reasoning,
    content)`` gives text to append to the content once the stream ends.
    """

    def __init__(
        self,
        parser: ReasoningParser,
        thinking: bool | None,
        on_delta: DeltaListener | None,
        calls_from_reasoning: Callable[[str, str], str],
    ) -> None:
        self.parser = parser
        self.thinking = thinking
        self.on_delta = on_delta
        self.calls_from_reasoning = calls_from_reasoning
        self.reasoning_parts: list[str] = []
        self.content_parts: list[str] = []
        self.native = ToolCallAccumulator()
        self.parsed_calls: list[Any] = []
        self.parser_stream: Any = None
        self.provider_reasoning = False
        self.usage: Any = None
        self.pieces = 0
        """Chunks that brought text or tool-call pieces: hosts send a token a chunk."""
        self.finished = False
        """Whether a chunk carried a ``finish_reason``: a stream without one was cut off."""
        self.delivered = 0
        """Characters handed to the listener so far."""

    def emit(self, reasoning: str, content: str) -> None:
        """Keep a delta and hand it to the listener."""
        if reasoning:
            self.reasoning_parts.append(reasoning)
        if content:
            self.content_parts.append(content)
        if self.on_delta is not None and (reasoning or content):
            self.on_delta(reasoning, content)
            self.delivered += len(reasoning) + len(content)

    def broke(self, exc: Exception) -> None:
        """The stream failed with ``exc``: ``PartialStreamError`` once text reached the listener
        (the call must not be retried, the listener would see text twice); else nothing."""
        if self.delivered and is_call_failure(exc):
            raise PartialStreamError(exc, self.delivered) from exc

    def feed(self, chunk: Any) -> None:
        """Read one chunk: usage, reasoning and content deltas, tool-call deltas."""
        if getattr(chunk, "usage", None):
            self.usage = chunk.usage
        choices = getattr(chunk, "choices", None) or []
        if not choices:
            return
        if getattr(choices[0], "finish_reason", None):
            self.finished = True
        delta = getattr(choices[0], "delta", None)
        if delta is None:
            return
        # ``reasoning``: vLLM's newer name, which LiteLLM maps (a direct stream reads it as sent).
        reasoning_piece = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None) or ""
        if not isinstance(reasoning_piece, str):
            reasoning_piece = ""
        content_piece = getattr(delta, "content", None) or ""
        out_reasoning, out_content = reasoning_piece, ""
        if reasoning_piece:
            self.provider_reasoning = True
        if content_piece:
            if self.parser_stream is None and not self.provider_reasoning:
                self.parser_stream = self.parser.stream(self.thinking)
            if self.parser_stream is None:
                out_content = content_piece
            else:
                split = self.parser_stream.feed(content_piece)
                out_reasoning += split.reasoning
                out_content = split.content
                self.parsed_calls.extend(getattr(split, "tool_calls", ()) or ())
        if getattr(delta, "tool_calls", None):
            self.native.add(delta.tool_calls)
        if reasoning_piece or content_piece or getattr(delta, "tool_calls", None):
            self.pieces += 1
        self.emit(out_reasoning, out_content)

    def finish(self, stream: Any) -> tuple[str, str, list[NativeToolCall], Usage]:
        """Flush the parser; the reply's ``(content, reasoning, tool_calls, usage)``. A stream the
        host sent without usage gives ``counted_calls=1`` and the chunks that brought text or
        tool-call pieces as ``completion_tokens``, for the model service to complete the count.

        ``UnreadableReply`` when the host sent no chunk at all: LiteLLM skips the lines of an
        event stream that are not ``data:`` chunks and ends the stream with one of its own, so
        an HTML page or a JSON object answered to a streamed request would otherwise read as an
        empty reply. On the direct path (a ``ChatStream``), ``UnreadableReply`` (``cut-stream``)
        too when no chunk carried a ``finish_reason``, as LiteLLM says of such a stream
        (llama-cpp-python ends a stream it interrupts for another request with ``[DONE]`` and no
        ``finish_reason``); ``PartialStreamError`` around it once text reached the listener.
        """
        received = getattr(stream, "chunks", None)  # what LiteLLM received from the host
        if isinstance(received, list) and not received and not self.delivered:
            headers = getattr(stream, "_response_headers", None)
            found = [v for k, v in dict(headers or {}).items() if str(k).lower() == "content-type"]
            content_type = str(found[0]) if found else ""
            stream_type = not content_type or "event-stream" in content_type
            raise UnreadableReply("no-chunks" if stream_type else "not-stream", "", content_type)
        if isinstance(stream, ChatStream) and not self.finished:
            cut = UnreadableReply("cut-stream", "", stream.content_type)
            if self.delivered:
                raise PartialStreamError(cut, self.delivered) from cut
            raise cut
        if self.parser_stream is not None:
            tail = self.parser_stream.finish()
            self.parsed_calls.extend(getattr(tail, "tool_calls", ()) or ())
            self.emit(tail.reasoning, tail.content)
        reasoning, content = "".join(self.reasoning_parts), "".join(self.content_parts)
        self.emit("", self.calls_from_reasoning(reasoning, content))
        usage = self.usage
        if usage is not None and not host_reported_usage(stream):
            usage = None
        tool_calls = self.native.calls() + [parsed_tool_call(call) for call in self.parsed_calls]
        if usage is None:  # tandem counts it (``token_count``), from the chunks the host sent
            return (
                "".join(self.content_parts),
                reasoning,
                tool_calls,
                Usage(completion_tokens=self.pieces, total_tokens=self.pieces, calls=1, counted_calls=1),
            )
        return "".join(self.content_parts), reasoning, tool_calls, usage_of(usage)
