"""What tandem sends (``tandem.reasoner.models.wire``), on every path a call takes.

The fake host here refuses what llama-cpp-python's server refuses: an assistant turn with
``content: null`` (its request schema answers HTTP 500 with a validation error) or with no
``content`` at all (its tool-calling template fails: 500, ``'dict object' has no attribute
'content'``, which is what LiteLLM's dropping of a ``null`` content leads to); and, like it, it
offers a tool call only to a request that names a ``tool_choice``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.models.wire import chat_messages, tool_fields
from tests.openai_server import OpenAIServer, RecordedRequest, Reply
from tests.reasoner.models.test_direct_http import run_allowed
from tests.reasoner.models.test_litellm_async import TOOLS, ASleeps

MODEL = "openai/smollm2"
KEY = "sk-wire"

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "add 1 and 2"},
    {
        "role": "assistant",
        "content": None,  # how a ReAct step's tool-call turn is kept when the model wrote no text
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
]

LLAMA_CPP_VALIDATION = (
    "2 validation errors:\n"
    "  {'type': 'literal_error', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestSystemMessage', "
    "'role'), 'msg': \"Input should be 'system'\", 'input': 'assistant', 'ctx': {'expected': \"'system'\"}}\n"
    "  {'type': 'string_type', 'loc': ('body', 'messages', 2, 'ChatCompletionRequestAssistantMessage', "
    "'content'), 'msg': 'Input should be a valid string', 'input': None}"
)


def strict_host(request: RecordedRequest) -> Reply:
    """Refuses an assistant turn without text content as llama-cpp-python does; calls ``add``
    only when the request names a ``tool_choice``."""
    for message in request["messages"]:
        if message["role"] != "assistant":
            continue
        if "content" not in message:
            return Reply(status=500, error="'dict object' has no attribute 'content'")
        if not isinstance(message["content"], str):
            return Reply(status=500, error=LLAMA_CPP_VALIDATION)
    if request.get("tools") and request.get("tool_choice") in ("auto", "required"):
        return Reply(None, tool_calls=[{"id": "call_2", "name": "add", "arguments": {"a": 3, "b": 4}}])
    return Reply("The sum is 3.")


def service(server: OpenAIServer, *, stream: bool = False, **kwargs: Any) -> LiteLlmModelService:
    return LiteLlmModelService(
        MODEL, api_base=server.url, api_key=KEY, stream=stream, max_retries=0, asleep=ASleeps(), **kwargs
    )


CallPath = Callable[[LiteLlmModelService, list[dict[str, Any]]], ModelMessage]
PATHS: dict[str, CallPath] = {
    "litellm": lambda s, m: s.generate("sys", m, tools=TOOLS),
    "litellm-async": lambda s, m: asyncio.run(s.agenerate("sys", m, tools=TOOLS)),
    "direct": lambda s, m: run_allowed(lambda: s.agenerate("sys", m, tools=TOOLS)),
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_tool_call_turn_without_text_is_sent_with_empty_content(path: str, stream: bool) -> None:
    with OpenAIServer(strict_host, chunk_size=4) as server:
        reply = PATHS[path](service(server, stream=stream), HISTORY)
        [request] = server.requests
    sent = request["messages"][2]
    assert sent == {**HISTORY[1], "content": ""}
    assert HISTORY[1]["content"] is None, "the caller's message is not changed"
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("add", '{"a": 3, "b": 4}')]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_tool_choice_goes_with_the_tools(path: str, stream: bool) -> None:
    with OpenAIServer(strict_host) as server:
        PATHS[path](service(server, stream=stream), HISTORY[:1])
        [request] = server.requests
    assert request["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in request["tools"]] == ["add"]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_role_may_name_another_tool_choice_or_none(path: str) -> None:
    with OpenAIServer(strict_host) as server:
        PATHS[path](service(server, tool_choice="required"), HISTORY[:1])
        omitted = PATHS[path](service(server, tool_choice="omit"), HISTORY[:1])
        required, without = server.requests
    assert required["tool_choice"] == "required"
    assert "tool_choice" not in without and without["tools"]
    assert omitted.content == "The sum is 3." and not omitted.tool_calls  # this host offers none then


def test_no_tool_choice_without_tools() -> None:
    with OpenAIServer(strict_host) as server:
        service(server).generate("sys", HISTORY[:1])
        run_allowed(lambda: service(server).agenerate("sys", HISTORY[:1]))
    assert all("tool_choice" not in r and "tools" not in r for r in server.requests)


def test_an_unknown_tool_choice_is_refused_when_the_service_is_made() -> None:
    from tandem.reasoner.errors import ConfigurationError

    with pytest.raises(
        ConfigurationError, match="tool_choice must be one of auto, required, none, omit, not 'any'"
    ):
        LiteLlmModelService(MODEL, tool_choice="any")


def test_chat_messages_and_tool_fields() -> None:
    assert chat_messages("", [{"role": "assistant"}]) == [{"role": "assistant", "content": ""}]
    assert chat_messages("s", [{"role": "user", "content": None}]) == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": None},  # only assistant turns are the host's to refuse so
    ]
    assert tool_fields(None, "auto") == tool_fields([], "required") == {}
    assert tool_fields([{"type": "function"}], "none") == {
        "tools": [{"type": "function"}],
        "tool_choice": "none",
    }
