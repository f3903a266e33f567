"""Streamed calls posted straight to an OpenAI-compatible host (``direct_http.open_stream``).

Against the local OpenAI-compatible server, on a loop that allows direct calls: a streamed call skips
LiteLLM and gives the reply, and the deltas, that LiteLLM's stream gives on any other loop, from the
same request; a stream cut after text reached the listener is not retried; errors read as the
non-streamed path's (the malformed answers are in ``test_malformed_replies``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_direct_http import (
    KEY,
    MODEL,
    TOOL_CALLS,
    TOOLS,
    USER,
    litellm_calls,
    make,
    run_allowed,
)

__all__ = ["litellm_calls"]  # the fixture, shared


def _deltas() -> tuple[list[tuple[str, str]], Any]:
    seen: list[tuple[str, str]] = []
    return seen, lambda reasoning, content: seen.append((reasoning, content))


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply("The answer is 4."), id="content"),
        pytest.param(Reply("<think>2 and 2 make 4</think>The answer is 4."), id="think-tags"),
        pytest.param(Reply("The answer is 4.", reasoning_content="add them"), id="provider-reasoning"),
        pytest.param(Reply("Calling.", reasoning_content="need a tool", tool_calls=TOOL_CALLS), id="tools"),
        pytest.param(Reply("4", usage={"prompt_tokens": 11, "completion_tokens": 5}), id="usage"),
        pytest.param(Reply("4", usage=None), id="no-usage"),
    ],
)
def test_a_direct_stream_gives_the_reply_and_deltas_litellm_gives(
    reply: Reply, litellm_calls: list[str]
) -> None:
    with OpenAIServer(reply, chunk_size=3) as server:
        service, _ = make(server.url, stream=True)
        through, on_through = _deltas()
        expected = asyncio.run(service.agenerate("sys", USER, tools=TOOLS, on_delta=on_through))
        assert litellm_calls == [MODEL], "a loop that was not allowed goes through LiteLLM"
        direct, on_direct = _deltas()
        got = run_allowed(lambda: service.agenerate("sys", USER, tools=TOOLS, on_delta=on_direct))
        assert litellm_calls == [MODEL], "the allowed loop skipped LiteLLM"
        via_litellm, straight = server.requests
    assert got.model_dump() == expected.model_dump()
    assert "".join(c for _, c in direct) == "".join(c for _, c in through) == got.content
    assert "".join(r for r, _ in direct) == "".join(r for r, _ in through) == got.reasoning
    assert len(direct) == len(through)  # in the same pieces, as they were written
    assert straight["stream"] is True and straight["stream_options"] == {"include_usage": True}
    assert straight["messages"] == via_litellm["messages"] and straight["tools"] == via_litellm["tools"]
    assert straight.headers["authorization"] == f"Bearer {KEY}"


def test_a_direct_stream_cut_after_text_is_not_retried(litellm_calls: list[str]) -> None:
    with OpenAIServer([Reply("the answer is four", break_after=3), Reply("4")], chunk_size=3) as server:
        service, asleeps = make(server.url, stream=True)
        seen, on_delta = _deltas()
        with pytest.raises(TransientModelError, match="stream broke after"):
            run_allowed(lambda: service.agenerate("sys", USER, on_delta=on_delta))
        assert server.request_count == 1
    assert "".join(c for _, c in seen).startswith("the") and asleeps == []
    assert litellm_calls == []


def test_a_direct_stream_cut_before_any_text_is_retried(litellm_calls: list[str]) -> None:
    with OpenAIServer([Reply("four", break_after=0), Reply("4")], chunk_size=3) as server:
        service, asleeps = make(server.url, stream=True)
        assert run_allowed(lambda: service.agenerate("sys", USER)).content == "4"
        assert server.request_count == 2
    assert len(asleeps) == 1 and litellm_calls == []


def test_a_direct_stream_keeps_the_status_of_an_error_answer(litellm_calls: list[str]) -> None:
    with OpenAIServer(Reply(status=401, error="Incorrect API key provided")) as server:
        service, asleeps = make(server.url, stream=True)
        with pytest.raises(ModelCallError) as caught:
            run_allowed(lambda: service.agenerate("sys", USER))
        assert server.request_count == 1
    assert not isinstance(caught.value, TransientModelError) and asleeps == []
    assert caught.value.status_code == 401 and KEY not in str(caught.value)
