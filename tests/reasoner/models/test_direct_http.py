"""``tandem.reasoner.models.direct_http``: non-streamed calls posted straight to an OpenAI-compatible host.

Against the local OpenAI-compatible server: on a loop that ``allow``s it, ``agenerate`` skips
LiteLLM (its ``acompletion`` is counted) and gives the reply LiteLLM gives on any other loop, from
the request LiteLLM would send; errors read as LiteLLM's do (status, ``Retry-After``, connection,
time-out); ``ModelLoop`` allows its loop and closes the session when it stops; ``proxy_for`` reads
the proxy variables.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest

from tandem.reasoner.errors import ConfigurationError, ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models import direct_http, litellm_setup
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.tasks.hosts.model_loop import ModelLoop
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_litellm_async import MODEL, TOOL_CALLS, TOOLS, USER, ASleeps

T = TypeVar("T")
KEY = "sk-direct-test"


@pytest.fixture
def litellm_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models of the calls that went through ``litellm.acompletion``."""
    litellm = litellm_setup.import_litellm()
    original, calls = litellm.acompletion, []

    async def counted(**kwargs: Any) -> Any:
        calls.append(kwargs["model"])
        return await original(**kwargs)

    monkeypatch.setattr(litellm, "acompletion", counted)
    return calls


def make(api_base: str, model: str = MODEL, **kwargs: Any) -> tuple[LiteLlmModelService, ASleeps]:
    asleeps = ASleeps()
    kwargs.setdefault("api_key", KEY)
    return LiteLlmModelService(model, api_base=api_base, asleep=asleeps, **kwargs), asleeps


def run_allowed(call: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(call())`` on a loop that allows direct calls (its session closed after)."""

    async def main() -> T:
        direct_http.allow(asyncio.get_running_loop())
        try:
            return await call()
        finally:
            await direct_http.close()

    return asyncio.run(main())


def direct_call(service: LiteLlmModelService, **kwargs: Any) -> ModelMessage:
    return run_allowed(lambda: service.agenerate("sys", USER, **kwargs))


async def current_session() -> Any:
    return direct_http.session()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the same reply as LiteLLM's, from the same request -------------------------------------


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
def test_direct_call_gives_the_reply_litellm_gives(reply: Reply, litellm_calls: list[str]) -> None:
    with OpenAIServer(reply) as server:
        service, _ = make(server.url)
        expected = asyncio.run(service.agenerate("sys", USER, tools=TOOLS))
        assert litellm_calls == [MODEL], "a loop that was not allowed goes through LiteLLM"
        deltas: list[tuple[str, str]] = []
        got = direct_call(service, tools=TOOLS, on_delta=lambda r, c: deltas.append((r, c)))
        assert litellm_calls == [MODEL], "the allowed loop skipped LiteLLM"
        through_litellm, direct = server.requests
    assert got.model_dump() == expected.model_dump()
    assert deltas == [(got.reasoning, got.content)]
    assert direct["messages"] == through_litellm["messages"]
    assert direct["tools"] == through_litellm["tools"] == [TOOLS[0].openai_schema()]


def test_direct_request_is_the_body_litellm_sends(litellm_calls: list[str]) -> None:
    with OpenAIServer("4") as server:
        service, _ = make(
            server.url, temperature=0.25, max_tokens=64, thinking=True, extra_body={"top_k": 20}
        )
        asyncio.run(service.agenerate("sys", USER))
        direct_call(service)
        through_litellm, direct = server.requests
    assert len(litellm_calls) == 1
    assert dict(direct) == {
        "model": "test-model",
        "messages": [{"role": "system", "content": "sys"}, *USER],
        "temperature": 0.25,
        "max_tokens": 64,
        "chat_template_kwargs": {"enable_thinking": True, "thinking": True},
        "top_k": 20,
    }
    assert {key: through_litellm[key] for key in direct} == dict(direct)
    assert direct.headers["authorization"] == f"Bearer {KEY}"


def test_hosted_vllm_without_a_key_goes_direct_without_authorization(
    litellm_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOSTED_VLLM_API_KEY", raising=False)
    with OpenAIServer("4") as server:
        service, _ = make(server.url, model="hosted_vllm/test-model", api_key=None)
        assert direct_call(service).content == "4"
        (request,) = server.requests
    assert litellm_calls == []
    assert request["model"] == "test-model" and "authorization" not in request.headers


def test_a_url_with_credentials_goes_direct_as_http_basic(
    litellm_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOSTED_VLLM_API_KEY", raising=False)
    with OpenAIServer("4") as server:
        base = server.url.replace("http://", "http://ops:s3cret@")
        service, _ = make(base, model="hosted_vllm/test-model", api_key=None)
        assert direct_call(service).content == "4"
        (request,) = server.requests
    assert litellm_calls == []
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"ops:s3cret").decode()


def test_a_url_with_credentials_and_a_key_too_is_refused_when_the_service_is_made() -> None:
    with pytest.raises(ConfigurationError) as refused:
        make("http://ops:s3cret@gpu-1:8000/v1", model="hosted_vllm/test-model", api_key=KEY)
    assert str(refused.value).startswith(
        "api_base='http://ops:***@gpu-1:8000/v1' holds a user and password, and api_key is set too: "
    )
    assert "s3cret" not in str(refused.value) and KEY not in str(refused.value)


# -- when calls keep going through LiteLLM -----------------------------------------------------


BASE = "http://h/v1"


@pytest.mark.parametrize(
    ("model", "api_base", "api_key", "expected"),
    [
        ("openai/m", BASE, "k", "m"),
        ("openai/gpt-oss-120b", BASE, "k", "gpt-oss-120b"),
        ("hosted_vllm/org/m", BASE, None, "org/m"),
        ("openai/m", BASE, None, None),  # LiteLLM reads OPENAI_API_KEY
        ("openai/m", None, "k", None),
        ("openai/", BASE, "k", None),
        ("anthropic/x", BASE, "k", None),
        ("gpt-4o", BASE, "k", None),
        ("openai/gpt-5-mini", BASE, "k", None),  # LiteLLM rewrites max_tokens and temperature
        ("openai/o3-mini", BASE, "k", None),
        ("openai/openai/o4-mini", BASE, "k", None),
    ],
)
def test_direct_model_names_only_openai_compatible_hosts(
    model: str,
    api_base: str | None,
    api_key: str | None,
    expected: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HOSTED_VLLM_API_KEY", raising=False)
    assert direct_http.direct_model(model, api_base, api_key) == expected


@pytest.mark.parametrize(
    ("model", "variable"),
    [(MODEL, "OPENAI_API_KEY"), ("hosted_vllm/test-model", "HOSTED_VLLM_API_KEY")],
)
def test_a_key_left_to_the_environment_goes_through_litellm_which_reads_it(
    model: str, variable: str, litellm_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "sk-from-env")
    with OpenAIServer("4", api_key="sk-from-env") as server:
        service, _ = make(server.url, model=model, api_key=None)
        assert direct_call(service).content == "4"
    assert litellm_calls == [model]


def test_openai_reasoning_model_goes_through_litellm_which_rewrites_its_request(
    litellm_calls: list[str],
) -> None:
    with OpenAIServer("4") as server:
        service, _ = make(server.url, model="openai/gpt-5-mini", temperature=0.3, max_tokens=64)
        assert direct_call(service).content == "4"
        (request,) = server.requests
    assert litellm_calls == ["openai/gpt-5-mini"]
    assert request["max_completion_tokens"] == 64 and "max_tokens" not in request
    assert "temperature" not in request


# -- errors read as LiteLLM's ---------------------------------------------------------------


def test_429_not_retried_here_keeps_status_and_retry_after(litellm_calls: list[str]) -> None:
    with OpenAIServer(Reply(status=429, headers={"Retry-After": "7"})) as server:
        service, asleeps = make(server.url, no_retry_statuses={429})
        with pytest.raises(TransientModelError) as caught:
            direct_call(service)
        assert server.request_count == 1
    assert caught.value.status_code == 429 and caught.value.retry_after == 7.0
    assert asleeps == [] and litellm_calls == []


def test_429_is_retried_after_its_retry_after(litellm_calls: list[str]) -> None:
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "3"}), Reply("4")]) as server:
        service, asleeps = make(server.url)
        assert direct_call(service).content == "4"
        assert server.request_count == 2
    assert asleeps == [3.0] and litellm_calls == []


def test_retry_after_past_the_hold_is_handed_to_the_caller(litellm_calls: list[str]) -> None:
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "10"}), Reply("4")]) as server:
        service, asleeps = make(server.url, retry_hold=5.0)
        with pytest.raises(TransientModelError) as caught:
            direct_call(service)
        assert server.request_count == 1
    assert caught.value.status_code == 429 and caught.value.retry_after == 10.0
    assert asleeps == [] and litellm_calls == []


@pytest.mark.parametrize(
    ("server_key", "reply", "status", "words"),
    [
        pytest.param("sk-other", Reply("4"), 401, ["Incorrect API key", "API_KEY"], id="401"),
        pytest.param(None, Reply(status=400, error="top_k is not supported"), 400, ["top_k"], id="400"),
    ],
)
def test_client_errors_fail_at_once_naming_model_and_host(
    server_key: str | None, reply: Reply, status: int, words: list[str]
) -> None:
    with OpenAIServer(reply, api_key=server_key) as server:
        service, asleeps = make(server.url)
        with pytest.raises(ModelCallError) as caught:
            direct_call(service)
        assert server.request_count == 1
    message = str(caught.value)
    assert not isinstance(caught.value, TransientModelError)
    assert caught.value.status_code == status
    assert all(word in message for word in [MODEL, server.url, f"HTTP {status}", *words]), message
    assert KEY not in message and asleeps == []


def test_refused_connection_is_transient_and_retried() -> None:
    service, asleeps = make(f"http://127.0.0.1:{unused_port()}/v1", max_retries=1)
    with pytest.raises(TransientModelError, match="connection failed") as caught:
        direct_call(service)
    assert "after 2 attempts" in str(caught.value) and len(asleeps) == 1


def test_time_out_is_transient() -> None:
    with OpenAIServer("4", latency=2.0) as server:
        service, _ = make(server.url, timeout=0.2, max_retries=0)
        with pytest.raises(TransientModelError, match="timed out"):
            direct_call(service)


def test_an_aiohttp_time_out_stays_a_time_out() -> None:
    """``ServerTimeoutError`` is an ``aiohttp.ClientError`` too: not a connection failure."""

    class TimingOut:
        def post(self, *args: Any, **kwargs: Any) -> Any:
            raise aiohttp.ServerTimeoutError("Timeout on reading data from socket")

    with pytest.raises(TimeoutError) as caught:
        asyncio.run(direct_http.post_chat(TimingOut(), "http://h/v1", None, {}, 1.0))
    assert not isinstance(caught.value, direct_http.HostConnectionError)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param({"object": "list", "data": []}, "JSON that is not a chat completion", id="not-chat"),
        pytest.param({"choices": [{"message": {"content": 4}}]}, "not a chat completion", id="bad-msg"),
        pytest.param([1, 2], "not a chat completion", id="json-list"),
    ],
)
def test_a_200_that_is_not_a_chat_completion_is_retried_then_fails(body: Any, words: str) -> None:
    """Transient, but bounded (issue 22): retried with back-off, then a clear error, not parked."""
    with OpenAIServer("4") as server:
        server.completion_body = lambda reply, request: body  # type: ignore[method-assign]
        service, asleeps = make(server.url, max_retries=2)
        with pytest.raises(ModelCallError, match=words) as caught:
            direct_call(service)
        assert server.request_count == 3
    assert not isinstance(caught.value, TransientModelError) and len(asleeps) == 2
    assert "3 tries" in str(caught.value)


# -- sessions and loops ---------------------------------------------------------------------


def test_close_closes_the_session_and_disallows_the_loop() -> None:
    async def main() -> None:
        direct_http.allow(asyncio.get_running_loop())
        session = direct_http.session()
        assert direct_http.session() is session, "one session per loop"
        assert session is not None
        await direct_http.close()
        assert session.closed
        assert direct_http.session() is None

    asyncio.run(main())
    assert asyncio.run(current_session()) is None, "a loop is not allowed unless it says so"


@pytest.mark.parametrize("direct", [True, False], ids=["direct_http", "litellm"])
def test_model_loop_allows_its_loop_only_with_direct_http_and_closes_the_session_when_stopped(
    direct: bool, litellm_calls: list[str]
) -> None:
    loop = ModelLoop("test-model-loop", direct_http=direct)
    with OpenAIServer("4") as server:
        service, _ = make(server.url)
        try:
            reply = loop.run(lambda on_delta: service.agenerate("", USER, on_delta=on_delta))
            session = loop.run(lambda _: current_session())
        finally:
            loop.stop()
    assert reply.content == "4"
    assert litellm_calls == ([] if direct else [MODEL])
    assert (session is not None) is direct
    assert session is None or session.closed, "stop() closes the loop's session"


# -- proxies ---------------------------------------------------------------------------------


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    direct_http.proxy_for.cache_clear()
    yield monkeypatch
    direct_http.proxy_for.cache_clear()


def test_proxy_for_reads_the_proxy_variables_less_no_proxy(proxy_env: pytest.MonkeyPatch) -> None:
    proxy_env.setenv("HTTP_PROXY", "http://proxy.example:3128")
    proxy_env.setenv("NO_PROXY", "localhost,.internal")
    assert direct_http.proxy_for("http://api.example.com/v1/chat/completions") == "http://proxy.example:3128"
    assert direct_http.proxy_for("http://vllm.internal:8000/v1/chat/completions") is None
    assert direct_http.proxy_for("http://localhost:8000/v1/chat/completions") is None
    assert direct_http.proxy_for("https://api.example.com/v1/chat/completions") is None
    proxy_env.setenv("ALL_PROXY", "http://all.example:3128")
    direct_http.proxy_for.cache_clear()
    assert direct_http.proxy_for("https://api.example.com/v1/chat/completions") == "http://all.example:3128"


def test_direct_call_goes_through_the_proxy(proxy_env: pytest.MonkeyPatch) -> None:
    """The test server as the proxy: it gets the absolute URL of the host, which it has no route for."""
    with OpenAIServer("4") as server:
        proxy_env.setenv("HTTP_PROXY", server.url.removesuffix("/v1"))
        service, _ = make("http://model-host.invalid/v1")
        with pytest.raises(ModelCallError, match=r"no route POST http://model-host\.invalid/v1/chat/"):
            direct_call(service)
