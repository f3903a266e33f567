"""Streams a host ends early, as llama-cpp-python's server does.

* It fails a streamed request after its headers: for a conversation longer than its context, or
  tools it cannot stream, it answers 200 with an event stream that ends without a chunk, and says
  why only to a plain request. Such a stream is asked again at once without streaming.
* It interrupts a stream when another request comes (``--interrupt_requests``, on by default):
  ``data: [DONE]`` after the chunks so far, none with a ``finish_reason``. Such a stream is cut
  off, on the direct path as through LiteLLM: retried before any text reached the listener, a
  ``TransientModelError`` after.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tests.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.reasoner.models.test_direct_http import run_allowed
from tests.reasoner.models.test_litellm_async import USER, ASleeps
from tests.reasoner.models.test_refusals import LLAMA_CPP_CONTEXT

Listener = Callable[[str, str], None]
PATHS: dict[str, Callable[[LiteLlmModelService, Listener], ModelMessage]] = {
    "litellm-stream": lambda s, d: s.generate("sys", USER, on_delta=d),
    "litellm-async-stream": lambda s, d: asyncio.run(s.agenerate("sys", USER, on_delta=d)),
    "direct-stream": lambda s, d: run_allowed(lambda: s.agenerate("sys", USER, on_delta=d)),
}
EMPTY_STREAM = Reply(body="", content_type="text/event-stream")


def empty_streams(plain: Reply) -> Callable[[RecordedRequest], Reply]:
    """A host that answers every streamed request with an empty event stream, plain ones ``plain``."""
    return lambda request: EMPTY_STREAM if request.get("stream") else plain


def make(server: OpenAIServer) -> LiteLlmModelService:
    sleeps: list[float] = []
    return LiteLlmModelService(
        "openai/smollm2",
        api_base=server.url,
        api_key="sk-e",
        stream=True,
        sleep=sleeps.append,
        asleep=ASleeps(),
    )


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_plain_answer_is_the_reply(path: str) -> None:
    deltas: list[tuple[str, str]] = []
    with OpenAIServer(empty_streams(Reply("The answer is 4."))) as server:
        reply = PATHS[path](make(server), lambda r, c: deltas.append((r, c)))
        streamed, plain = server.requests
    assert streamed["stream"] is True
    assert "stream" not in plain and "stream_options" not in plain
    assert plain["messages"] == streamed["messages"]
    assert reply.content == "The answer is 4." and deltas == [("", "The answer is 4.")]
    assert reply.usage.prompt_tokens > 0 and reply.usage.counted_calls == 0  # the plain answer's usage


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_plain_answers_refusal_fails_the_call_at_once(path: str) -> None:
    with OpenAIServer(empty_streams(Reply(status=400, error=LLAMA_CPP_CONTEXT))) as server:
        with pytest.raises(ModelCallError) as caught:
            PATHS[path](make(server), lambda r, c: None)
        assert server.request_count == 2
    assert not isinstance(caught.value, TransientModelError)
    assert "maximum context length is 512 tokens" in str(caught.value)
    assert "--n_ctx" in str(caught.value)


def test_a_host_that_never_answers_with_a_completion_is_given_up_on_as_before() -> None:
    with OpenAIServer(empty_streams(Reply.malformed("empty"))) as server:
        with pytest.raises(ModelCallError, match="no chat completion in 5 tries in a row"):
            PATHS["direct-stream"](make(server), lambda r, c: None)
        assert [bool(r.get("stream")) for r in server.requests] == [True, False, False, False, False]


def interrupted(pieces: list[str]) -> Reply:
    """An event stream of a role chunk and ``pieces``, then ``[DONE]``: no ``finish_reason``."""
    chunks: list[dict[str, Any]] = [{"role": "assistant"}, *({"content": p} for p in pieces)]
    lines = []
    for delta in chunks:
        chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
        lines.append(f"data: {json.dumps(chunk)}\n")
    return Reply(body="\n".join(lines) + "\ndata: [DONE]\n\n", content_type="text/event-stream")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_stream_interrupted_before_any_text_is_retried(path: str) -> None:
    deltas: list[tuple[str, str]] = []
    with OpenAIServer([interrupted([]), Reply("The answer is 4.")]) as server:
        reply = PATHS[path](make(server), lambda r, c: deltas.append((r, c)))
        assert server.request_count == 2 and all(r["stream"] for r in server.requests)
    assert reply.content == "The answer is 4." == "".join(c for _, c in deltas)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_stream_interrupted_after_text_is_not_taken_for_the_reply(path: str) -> None:
    deltas: list[tuple[str, str]] = []
    with OpenAIServer([interrupted(["The ans"]), Reply("The answer is 4.")]) as server:
        with pytest.raises(TransientModelError, match="not retried here"):
            PATHS[path](make(server), lambda r, c: deltas.append((r, c)))
        assert server.request_count == 1
    assert "".join(c for _, c in deltas) == "The ans"
