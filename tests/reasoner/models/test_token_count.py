"""Replies without usage are counted by tandem (``tandem.reasoner.models.token_count``).

The local server plays each host's tokenize endpoint (it counts words). The prompt is counted by
the host's tokenizer; a plain reply too, a streamed one a token a chunk (the server sends
``CHUNK`` characters a chunk). A reply whose host reported usage never costs a tokenize request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.models.litellm_setup import import_litellm
from tandem.reasoner.models.token_count import (
    MESSAGE_FRAMING,
    REPLY_FRAMING,
    TokenCounter,
    estimate,
    prompt_text,
)
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_direct_http import run_allowed
from tests.reasoner.models.test_litellm_async import USER, ASleeps

KEY = "sk-count"
REPLY = "The answer is four, as two and two make four."
CHUNK = 8

PATHS: dict[str, tuple[bool, Callable[[LiteLlmModelService], ModelMessage]]] = {
    "litellm": (False, lambda s: s.generate("sys", USER)),
    "litellm-stream": (True, lambda s: s.generate("sys", USER)),
    "litellm-async-stream": (True, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "direct": (False, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
    "direct-stream": (True, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
}
SENT = [{"role": "system", "content": "sys"}, *USER]


def make(server: OpenAIServer, path: str, model: str = "openai/smollm2") -> LiteLlmModelService:
    return LiteLlmModelService(
        model, api_base=server.url, api_key=KEY, stream=PATHS[path][0], asleep=ASleeps()
    )


def words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("host", ["llama-cpp-python", "llama.cpp", "vllm"])
def test_a_reply_without_usage_is_counted_by_the_hosts_tokenizer(path: str, host: str) -> None:
    streamed = PATHS[path][0]
    with OpenAIServer(Reply(REPLY, usage=None), tokenize=host, chunk_size=CHUNK) as server:
        service = make(server, path)
        first = PATHS[path][1](service)
        probes = list(server.tokenize_requests)
        second = PATHS[path][1](service)
        again = server.tokenize_requests[len(probes) :]
    prompt = words(prompt_text(SENT, None)) + MESSAGE_FRAMING * 2 + REPLY_FRAMING
    completion = -(-len(REPLY) // CHUNK) if streamed else words(REPLY)  # chunks, or the tokenizer's
    assert first.usage.model_dump() == {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "calls": 1,
        "cost_usd": 0.0,
        "counted_calls": 1,
    }
    assert second.usage == first.usage
    # the endpoints are tried in order once (the last one counting the prompt); then only the one
    # that answered is asked, for the prompt and for a plain reply
    tried = {"llama-cpp-python": 1, "llama.cpp": 2, "vllm": 3}[host]
    per_call = 1 if streamed else 2
    assert len(probes) == tried + per_call - 1
    assert [path for path, _ in again] == [probes[-1][0]] * per_call
    if host == "vllm":
        assert again[0][1] == {"model": "smollm2", "prompt": prompt_text(SENT, None)}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_reply_with_usage_costs_no_tokenize_request(path: str) -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    with OpenAIServer(Reply(REPLY, usage=usage), tokenize="llama-cpp-python") as server:
        reply = PATHS[path][1](make(server, path))
        assert server.tokenize_requests == []
    assert (reply.usage.prompt_tokens, reply.usage.counted_calls) == (11, 0)


@pytest.mark.parametrize("path", ["litellm-stream", "direct-stream"])
def test_a_stream_counts_a_token_a_chunk(path: str) -> None:
    """Five chunks of one word: the tokenizer would make one token of the text, the host sent five."""
    reply = Reply("abcde", usage=None, content_chunks=["a", "b", "c", "d", "e"])
    with OpenAIServer(reply, tokenize="llama-cpp-python") as server:
        got = PATHS[path][1](make(server, path))
    assert (got.usage.completion_tokens, got.usage.counted_calls) == (5, 1)


def test_a_host_without_a_tokenize_endpoint_is_asked_once_then_estimated() -> None:
    with OpenAIServer(Reply(REPLY, usage=None)) as server:
        service = make(server, "direct-stream")
        first = PATHS["direct-stream"][1](service)
        assert [p for p, _ in server.tokenize_requests] == [
            "/extras/tokenize/count",
            "/tokenize",
            "/tokenize",
        ]
        second = PATHS["direct-stream"][1](service)
        assert len(server.tokenize_requests) == 3
        plain = PATHS["direct"][1](make(server, "direct"))
    assert first.usage == second.usage
    assert (
        first.usage.prompt_tokens == estimate(prompt_text(SENT, None)) + MESSAGE_FRAMING * 2 + REPLY_FRAMING
    )
    assert plain.usage.completion_tokens == estimate(REPLY) and plain.usage.counted_calls == 1


def test_an_openai_model_is_counted_by_its_own_tokenizer() -> None:
    with OpenAIServer(Reply(REPLY, usage=None), tokenize="llama-cpp-python") as server:
        reply = PATHS["direct"][1](make(server, "direct", model="openai/gpt-4o-mini"))
        assert server.tokenize_requests == []
    count = import_litellm().token_counter
    prompt = count(model="gpt-4o-mini", text=prompt_text(SENT, None)) + MESSAGE_FRAMING * 2 + REPLY_FRAMING
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (
        prompt,
        count(model="gpt-4o-mini", text=REPLY),
    )
    assert reply.usage.counted_calls == 1 and reply.usage.cost_usd > 0  # priced like reported tokens


def test_a_host_gone_when_counting_is_estimated_and_asked_again_next_time() -> None:
    with OpenAIServer(Reply(REPLY, usage=None)) as server:
        url = server.url
    counter = TokenCounter("openai/smollm2", url, KEY)
    usage = counter.usage(SENT, None, REPLY, "", [])
    assert usage.completion_tokens == estimate(REPLY) and usage.counted_calls == 1
    with OpenAIServer(
        Reply(REPLY, usage=None), tokenize="llama.cpp", port=int(url.split(":")[2].split("/")[0])
    ) as up:
        assert counter.usage(SENT, None, REPLY, "", []).completion_tokens == words(REPLY)
        assert [p for p, _ in up.tokenize_requests] == ["/extras/tokenize/count", "/tokenize", "/tokenize"]


def test_the_prompt_counts_tool_calls_and_tool_schemas() -> None:
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "add", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "1"},
    ]
    tools = [{"type": "function", "function": {"name": "add"}}]
    assert prompt_text(messages, tools) == (
        'assistant\nadd {"a": 1}\ntool\n1\n{"type": "function", "function": {"name": "add"}}'
    )
