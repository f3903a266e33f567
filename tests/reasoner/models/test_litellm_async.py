"""``LiteLlmModelService.agenerate`` against the local OpenAI-compatible server.

The async call must give exactly the reply, retries and errors of ``generate``: the cases are
run through both and compared.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.models import attempt_notes
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.models.model_service import AsyncModelService, ModelRequest, agenerate
from tandem.toolkit.tool import Tool
from tests.openai_server import OpenAIServer, Reply

MODEL = "openai/test-model"
USER = [{"role": "user", "content": "What is 2 + 2?"}]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [Tool.from_function(add)]
TOOL_CALLS: list[dict[str, Any]] = [{"id": "call_add", "name": "add", "arguments": '{"a": 2, "b": 2}'}]


class ASleeps(list[float]):
    """A recording async ``asleep``: tests never wait."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server: OpenAIServer, **kwargs: Any) -> tuple[LiteLlmModelService, ASleeps]:
    asleeps = ASleeps()

    def no_sync_sleep(seconds: float) -> None:
        raise AssertionError("agenerate must not call the blocking sleep")

    service = LiteLlmModelService(
        MODEL, api_base=server.url, api_key="sk-test", sleep=no_sync_sleep, asleep=asleeps, **kwargs
    )
    return service, asleeps


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply("The answer is 4."), id="content"),
        pytest.param(Reply("<think>2 and 2 make 4</think>The answer is 4."), id="think-tags"),
        pytest.param(Reply("The answer is 4.", reasoning_content="add them"), id="provider-reasoning"),
        pytest.param(Reply("Calling.", reasoning_content="need a tool", tool_calls=TOOL_CALLS), id="tools"),
    ],
)
def test_agenerate_equals_generate(reply: Reply, stream: bool) -> None:
    with OpenAIServer(reply, chunk_size=3) as server:
        service, _ = make(server, stream=stream)
        expected = service.generate("sys", USER, tools=TOOLS)
        deltas: list[tuple[str, str]] = []
        got = asyncio.run(
            service.agenerate("sys", USER, tools=TOOLS, on_delta=lambda r, c: deltas.append((r, c)))
        )
        assert server.requests[1]["messages"] == server.requests[0]["messages"]
        assert server.requests[1].get("stream", False) is stream
    assert isinstance(service, AsyncModelService)
    assert got.model_dump() == expected.model_dump()
    assert "".join(r for r, _ in deltas) == got.reasoning
    assert "".join(c for _, c in deltas) == got.content
    if stream:
        assert len(deltas) > 1, "a streamed reply reaches the listener in pieces"


def test_async_429_is_retried_after_retry_after_without_blocking() -> None:
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "3"}), Reply("4")]) as server:
        service, asleeps = make(server)
        reply = asyncio.run(service.agenerate("", USER))
        assert server.request_count == 2
    assert reply.content == "4"
    assert asleeps == [3.0]


def test_async_retried_attempts_are_heard_by_the_listener_carried_into_the_loop() -> None:
    heard: list[str] = []
    with OpenAIServer([Reply(status=503), Reply("4")]) as server:
        service, _ = make(server)
        reply = asyncio.run(attempt_notes.within(heard.append, service.agenerate("", USER)))
    assert reply.content == "4"
    assert len(heard) == 1 and "503" in heard[0], heard


def test_async_retry_after_past_the_hold_is_handed_to_the_caller() -> None:
    """On the model loop the step's thread waits for the call: the hold bounds ``agenerate`` too."""
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "10"}), Reply("4")]) as server:
        service, asleeps = make(server, retry_hold=5.0)
        with pytest.raises(TransientModelError) as caught:
            asyncio.run(service.agenerate("", USER))
        assert server.request_count == 1
    assert asleeps == [] and caught.value.retry_after == 10.0


def test_async_client_error_fails_at_once_naming_model_and_host() -> None:
    with OpenAIServer(Reply(status=401, error="Incorrect API key provided")) as server:
        service, asleeps = make(server)
        with pytest.raises(ModelCallError) as caught:
            asyncio.run(service.agenerate("", USER))
        assert server.request_count == 1
    assert not isinstance(caught.value, TransientModelError)
    assert MODEL in str(caught.value) and server.url in str(caught.value) and "API_KEY" in str(caught.value)
    assert "sk-test" not in str(caught.value)
    assert asleeps == []


def test_async_stream_broken_after_text_is_not_retried() -> None:
    script = [Reply("the answer is four", break_after=3), Reply("4")]
    with OpenAIServer(script, chunk_size=3) as server:
        service, _ = make(server, stream=True)
        seen: list[str] = []
        with pytest.raises(TransientModelError, match="stream broke after"):
            asyncio.run(service.agenerate("", USER, on_delta=lambda r, c: seen.append(c)))
        assert server.request_count == 1
    assert "".join(seen).startswith("the")


def test_async_calls_overlap_on_one_loop() -> None:
    """Eight calls on one event loop are at the host together, not one after another: each reply
    is held 2 s, so the host sees all eight in flight at once (counted there, not timed here)."""
    with OpenAIServer(Reply("4", delay=2.0)) as server:
        service, _ = make(server)

        async def many() -> list[str]:
            replies = await asyncio.gather(*(service.agenerate("", USER) for _ in range(8)))
            return [r.content for r in replies]

        contents = asyncio.run(many())
        assert (server.request_count, server.in_flight_max) == (8, 8)
    assert contents == ["4"] * 8


def test_agenerate_helper_runs_a_sync_only_service_in_a_thread() -> None:
    class SyncOnly:
        name = "sync-only"

        def generate(self, sys_prompt: str, messages: Any, tools: Any = None, **_: Any) -> Any:
            from tandem.reasoner.messages import ModelMessage

            return ModelMessage(role="actor", content=f"{sys_prompt}|{len(messages)}")

        def call_function(self, *args: Any) -> None:
            return None

    reply = asyncio.run(agenerate(SyncOnly(), ModelRequest("sys", [{"role": "user", "content": "x"}])))  # type: ignore[arg-type]
    assert reply.content == "sys|1"
