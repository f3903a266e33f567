"""``LiteLlmModelService`` against the local OpenAI-compatible test server (real HTTP, no mocks)."""

from __future__ import annotations

import email.utils
import random
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.reasoner.errors import ConfigurationError, ModelCallError, TransientModelError
from tandem.reasoner.models import attempt_notes
from tandem.reasoner.models.litellm_service import LiteLlmModelService, parse_retry_after
from tandem.reasoner.models.model_service import ModelService
from tandem.toolkit.tool import Tool
from tests.openai_server import OpenAIServer, Reply

API_KEY = "sk-test-secret-4242"
MODEL = "openai/test-model"
USER = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer("4") as running:
        yield running


class Sleeps(list[float]):
    """A recording ``sleep``: tests never wait."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(server_or_url: OpenAIServer | str, **kwargs: Any) -> tuple[LiteLlmModelService, Sleeps]:
    sleeps = Sleeps()
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.url
    kwargs.setdefault("api_key", API_KEY)
    kwargs.setdefault("model", MODEL)
    service = LiteLlmModelService(api_base=url, sleep=sleeps, **kwargs)
    return service, sleeps


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def mul(x: int, y: int) -> int:
    """Multiply two integers."""
    return x * y


TOOLS = [Tool.from_function(add), Tool.from_function(mul)]
TOOL_CALLS: list[dict[str, Any]] = [
    {"id": "call_add", "name": "add", "arguments": '{"a": 2, "b": 2}'},
    {"id": "call_mul", "name": "mul", "arguments": '{"x": 3, "y": 7}'},
]


def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


# -- plain calls ---------------------------------------------------------------------------


def test_plain_reply_and_request_shape(server: OpenAIServer) -> None:
    service, _ = make(server, temperature=0.2, max_tokens=64)
    history = [*USER, {"role": "assistant", "content": "Let me see."}, {"role": "user", "content": "Go on."}]

    reply = service.generate("You are terse.", history)

    assert isinstance(service, ModelService)
    assert service.name == MODEL
    assert (reply.content, reply.reasoning, reply.tool_calls) == ("4", "", [])
    assert reply.model == MODEL and reply.role == "actor" and reply.round == 0
    [request] = server.requests
    assert request["messages"] == [{"role": "system", "content": "You are terse."}, *history]
    assert request["model"] == "test-model"
    assert request["temperature"] == 0.2 and request["max_tokens"] == 64
    assert "tools" not in request and "stream" not in request
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"


def test_key_is_not_in_repr(server: OpenAIServer) -> None:
    service, _ = make(server)
    assert API_KEY not in repr(service) and server.url in repr(service)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply("The answer is 4."), id="plain"),
        pytest.param(Reply("<think>2 and 2 make 4</think>The answer is 4."), id="think-tags"),
        pytest.param(Reply("The answer is 4.", reasoning_content="add them"), id="provider-reasoning"),
        pytest.param(Reply("", tool_calls=TOOL_CALLS), id="tool-calls"),
        pytest.param(
            Reply("Calling.", reasoning_content="need tools", tool_calls=TOOL_CALLS), id="everything"
        ),
    ],
)
def test_streaming_reply_equals_plain_reply(reply: Reply) -> None:
    with OpenAIServer(reply, chunk_size=3) as server:
        plain, _ = make(server)
        streaming, _ = make(server, stream=True)
        expected = plain.generate("sys", USER, tools=TOOLS)
        got = streaming.generate("sys", USER, tools=TOOLS)
        assert server.requests[1]["stream"] is True
        assert server.requests[1]["stream_options"] == {"include_usage": True}
    assert got.model_dump() == expected.model_dump()
    assert got.usage.total_tokens > 0


# -- retries -------------------------------------------------------------------------------


def test_429_is_retried_after_the_retry_after_seconds() -> None:
    script = [Reply(status=429, headers={"Retry-After": "3"}), Reply("4")]
    with OpenAIServer(script) as server:
        service, sleeps = make(server)
        reply = service.generate("", USER)
        assert server.request_count == 2
    assert reply.content == "4"
    assert sleeps == [3.0]


def test_retry_after_as_an_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 12, usegmt=True)
    with OpenAIServer([Reply(status=503, headers={"Retry-After": when}), Reply("4")]) as server:
        service, sleeps = make(server)
        assert service.generate("", USER).content == "4"
    [slept] = sleeps
    assert 9.0 <= slept <= 12.0


def test_retry_after_longer_than_backoff_max_is_handed_to_the_caller() -> None:
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "120"}), Reply("4")]) as server:
        service, sleeps = make(server, backoff_max=30.0)
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER)
        assert server.request_count == 1
    assert sleeps == []
    assert caught.value.retry_after == 120.0
    assert "120s" in str(caught.value) and "backoff_max" in str(caught.value)


def test_a_worker_holds_a_call_only_for_short_waits() -> None:
    """``retry_hold`` (a worker's ``TANDEM_RETRY_HOLD_SECONDS``): a Retry-After within it is slept,
    one past it (though under ``backoff_max``) is handed to the caller at once, who parks the step."""
    script = [Reply(status=429, headers={"Retry-After": "3"}), Reply("4")]
    with OpenAIServer(script) as server:
        service, sleeps = make(server, retry_hold=5.0)
        assert service.generate("", USER).content == "4"
    assert sleeps == [3.0]
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "10"}), Reply("4")]) as server:
        service, sleeps = make(server, retry_hold=5.0, backoff_max=30.0)
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER)
        assert server.request_count == 1
    assert sleeps == []  # before: slept 10 s in the step's thread
    assert (caught.value.retry_after, caught.value.status_code) == (10.0, 429)
    assert "retry_hold (5s in all, 0s waited)" in str(caught.value)


def test_the_hold_bounds_a_calls_waits_in_all() -> None:
    script = [Reply(status=503, headers={"Retry-After": "3"})] * 2 + [Reply("4")]
    with OpenAIServer(script) as server:
        service, sleeps = make(server, retry_hold=5.0)
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER)
        assert server.request_count == 2
    assert sleeps == [3.0]  # 3 + 3 would pass 5
    assert caught.value.retry_after == 3.0 and "3s waited" in str(caught.value)
    with OpenAIServer([Reply(status=500), Reply("4")]) as server:
        service, sleeps = make(server, retry_hold=0.0, rng=random.Random(1))
        with pytest.raises(TransientModelError) as caught:  # no wait at all: every retry is the caller's
            service.generate("", USER)
        assert server.request_count == 1 and sleeps == []
    assert caught.value.retry_after is None and caught.value.status_code == 500


def test_500_is_retried_with_jittered_backoff() -> None:
    with OpenAIServer([Reply(status=500), Reply(status=502), Reply("4")]) as server:
        service, sleeps = make(server, backoff_base=0.5, backoff_max=30.0)
        assert service.generate("", USER).content == "4"
        assert server.request_count == 3
    assert len(sleeps) == 2
    assert 0.0 <= sleeps[0] <= 0.5 and 0.0 <= sleeps[1] <= 1.0


def test_each_retried_attempt_is_heard_by_the_calls_listener_as_it_fails() -> None:
    heard: list[str] = []
    with OpenAIServer([Reply(status=500, error="boom"), Reply(status=502), Reply("4")]) as server:
        service, _ = make(server, backoff_base=0.01)
        with attempt_notes.noting(heard.append):
            assert service.generate("", USER).content == "4"
        assert service.generate("", USER).content == "4"  # no listener: nothing heard, nothing fails
    assert len(heard) == 2 and "500" in heard[0] and "502" in heard[1], heard


def test_exhausted_retries_raise_transient_error_naming_model_and_host() -> None:
    with OpenAIServer(Reply(status=503, error="engine overloaded")) as server:
        service, sleeps = make(server, max_retries=3, backoff_base=1.0, backoff_max=2.5)
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER)
        assert server.request_count == 4
    error = caught.value
    message = str(error)
    assert MODEL in message and server.url in message
    assert "HTTP 503" in message and "engine overloaded" in message and "4 attempts" in message
    assert (error.model, error.api_base, error.status_code) == (MODEL, server.url, 503)
    assert len(sleeps) == 3
    assert all(0.0 <= s <= cap for s, cap in zip(sleeps, [1.0, 2.0, 2.5], strict=True))
    assert API_KEY not in message


def test_max_retries_zero_makes_one_attempt() -> None:
    with OpenAIServer(Reply(status=500)) as server:
        service, sleeps = make(server, max_retries=0)
        with pytest.raises(TransientModelError):
            service.generate("", USER)
        assert server.request_count == 1 and sleeps == []


@pytest.mark.parametrize(
    ("status", "provider_says", "advice"),
    [
        pytest.param(400, "temperature must be at most 2", "parameters", id="400"),
        pytest.param(401, "Incorrect API key provided", "TANDEM_ACTOR_API_KEY", id="401"),
        pytest.param(403, "Model access denied", "permissions", id="403"),
        pytest.param(404, "The model `nope` does not exist", "api_base", id="404"),
        pytest.param(422, "messages: field required", "parameters", id="422"),
    ],
)
def test_client_errors_fail_at_once_with_advice(status: int, provider_says: str, advice: str) -> None:
    with OpenAIServer(Reply(status=status, error=provider_says)) as server:
        service, sleeps = make(server, role="actor")
        with pytest.raises(ModelCallError) as caught:
            service.generate("", USER)
        assert server.request_count == 1
    error = caught.value
    assert not isinstance(error, TransientModelError)
    assert sleeps == []
    message = str(error)
    assert f"HTTP {status}" in message and provider_says in message and advice in message
    assert MODEL in message and server.url in message
    assert API_KEY not in message
    assert error.status_code == status


def test_context_window_exceeded_fails_at_once() -> None:
    error_text = "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens."
    with OpenAIServer(Reply(status=400, error=error_text)) as server:
        service, _ = make(server)
        with pytest.raises(ModelCallError) as caught:
            service.generate("", USER)
        assert server.request_count == 1
    assert not isinstance(caught.value, TransientModelError)
    assert "context window" in str(caught.value) and "4096" in str(caught.value)


def test_an_openai_model_with_no_key_anywhere_fails_at_once_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # LiteLLM says "Missing credentials" as an HTTP 500: retried, a worker's job waited for its
    # deadline (an hour by default) to fail.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIServer(Reply(content="never asked")) as server:
        sleeps: list[float] = []
        service = LiteLlmModelService(
            "openai/m", api_base=server.url, max_retries=3, sleep=sleeps.append, role="actor"
        )
        with pytest.raises(ModelCallError) as caught:
            service.generate("", USER)
        assert server.request_count == 0
    assert not isinstance(caught.value, TransientModelError) and sleeps == []
    assert "TANDEM_ACTOR_API_KEY" in str(caught.value) and "any value" in str(caught.value)


def test_connection_refused_is_transient_and_retried() -> None:
    service, sleeps = make(closed_port_url(), max_retries=2)
    with pytest.raises(TransientModelError) as caught:
        service.generate("", USER)
    assert len(sleeps) == 2
    message = str(caught.value)
    assert "connection failed" in message and "API_BASE" in message and "127.0.0.1" in message
    assert caught.value.status_code is None


def test_connection_refused_then_server_up() -> None:
    url = closed_port_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    holder: dict[str, OpenAIServer] = {}

    def sleep(seconds: float) -> None:  # the host comes up while we back off
        holder.setdefault("server", OpenAIServer("4", port=port).start())

    service = LiteLlmModelService(MODEL, api_base=url, api_key=API_KEY, sleep=sleep)
    try:
        assert service.generate("", USER).content == "4"
    finally:
        if "server" in holder:
            holder["server"].stop()


def test_dropped_connection_is_retried() -> None:
    with OpenAIServer([Reply(disconnect=True), Reply("4")]) as server:
        service, sleeps = make(server)
        assert service.generate("", USER).content == "4"
        assert server.request_count == 2 and len(sleeps) == 1


def test_a_timeout_is_transient_and_spends_the_calls_time() -> None:
    """``timeout`` is the whole call's: an attempt that used it all is not followed by another
    (the caller reschedules the transient error)."""
    with OpenAIServer([Reply("slow", delay=1.0), Reply("4")]) as server:
        service, sleeps = make(server, timeout=0.3)
        with pytest.raises(TransientModelError, match=r"timed out: .*The call's time ran out \(timeout=0.3s"):
            service.generate("", USER)
        assert server.request_count == 1 and sleeps == []


def test_stream_broken_after_deltas_is_not_retried() -> None:
    with OpenAIServer([Reply("the answer is four", break_after=3), Reply("4")], chunk_size=3) as server:
        service, sleeps = make(server, stream=True)
        seen: list[str] = []
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER, on_delta=lambda r, c: seen.append(c))
        assert server.request_count == 1
    assert "".join(seen) == "the an"
    assert "not retried" in str(caught.value) and sleeps == []


def test_stream_broken_without_listener_is_retried() -> None:
    with OpenAIServer([Reply("the answer is four", break_after=3), Reply("4")], chunk_size=3) as server:
        service, _ = make(server, stream=True)
        assert service.generate("", USER).content == "4"
        assert server.request_count == 2


def test_listener_errors_propagate_unchanged(server: OpenAIServer) -> None:
    def boom(reasoning: str, content: str) -> None:
        raise KeyError("listener bug")

    service, sleeps = make(server, stream=True)
    with pytest.raises(KeyError):
        service.generate("", USER, on_delta=boom)
    assert server.request_count == 1 and sleeps == []


# -- reasoning -------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_provider_reasoning_is_used(stream: bool, field: str) -> None:
    reply = Reply("The answer is 4.", reasoning_content="2 plus 2 is 4", reasoning_field=field)
    with OpenAIServer(reply, chunk_size=4) as server:
        service, _ = make(server, stream=stream, reasoning_parser="qwen3", thinking=True)
        message = service.generate("", USER)
    assert (message.reasoning, message.content) == ("2 plus 2 is 4", "The answer is 4.")


@pytest.mark.parametrize(
    "chunks",
    [
        pytest.param(None, id="plain"),
        pytest.param(["<th", "ink>2 and", " 2</thi", "nk>", "Four."], id="tags-split-across-chunks"),
        pytest.param(["<", "t", "h", "i", "n", "k", ">2 and 2<", "/", "think>Four."], id="char-by-char"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
def test_think_tags_in_content_are_split(stream: bool, chunks: list[str] | None) -> None:
    text = "<think>2 and 2</think>Four."
    with OpenAIServer(Reply(text, content_chunks=chunks)) as server:
        service, _ = make(server, stream=stream)
        message = service.generate("", USER)
    assert (message.reasoning, message.content) == ("2 and 2", "Four.")


def test_thinking_goes_to_the_host_and_the_parser() -> None:
    with OpenAIServer("2 and 2</think>Four.") as server:
        service, _ = make(
            server,
            reasoning_parser="qwen3",
            thinking=True,
            extra_body={"chat_template_kwargs": {"custom": 1}, "top_k": 20},
        )
        message = service.generate("", USER)
        [request] = server.requests
    assert request["chat_template_kwargs"] == {"enable_thinking": True, "thinking": True, "custom": 1}
    assert request["top_k"] == 20
    assert (message.reasoning, message.content) == ("2 and 2", "Four.")


def test_no_thinking_sends_no_template_kwargs(server: OpenAIServer) -> None:
    service, _ = make(server)
    service.generate("", USER)
    assert "chat_template_kwargs" not in server.requests[0]


def test_parser_none_keeps_tags_as_content() -> None:
    with OpenAIServer("<think>x</think>y") as server:
        service, _ = make(server, reasoning_parser="none")
        message = service.generate("", USER)
    assert (message.reasoning, message.content) == ("", "<think>x</think>y")


def test_unknown_parser_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="no-such-parser"):
        LiteLlmModelService(MODEL, reasoning_parser="no-such-parser")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_calls_in_reasoning_are_appended_to_content(stream: bool) -> None:
    block = '<function_call>\n{"name": "add", "args": {"a": 1, "b": 2}}\n</function_call>'
    reply = Reply("<action>adding</action>", reasoning_content=f"I will call add.\n{block}\nDone.")
    with OpenAIServer(reply, chunk_size=5) as server:
        service, _ = make(server, stream=stream, tool_calls_in_reasoning=True)
        deltas: list[tuple[str, str]] = []
        message = service.generate("", USER, on_delta=lambda r, c: deltas.append((r, c)))
        off, _ = make(server, stream=stream)
        untouched = off.generate("", USER)
    assert message.content == f"<action>adding</action>\n{block}"
    assert block in message.reasoning
    assert "".join(c for _, c in deltas) == message.content
    assert untouched.content == "<action>adding</action>"


# -- usage -----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_usage_is_recorded(stream: bool) -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    with OpenAIServer(Reply("4", usage=usage)) as server:
        service, _ = make(server, stream=stream)
        message = service.generate("", USER)
    assert message.usage.model_dump() == {**usage, "calls": 1, "cost_usd": 0.0, "counted_calls": 0}


def test_cost_comes_from_litellms_local_cost_map() -> None:
    """gpt-4o-mini is priced in LiteLLM's bundled map: $0.15 / $0.60 per million tokens (the
    map's input_cost_per_token 1.5e-07 and output_cost_per_token 6e-07)."""
    usage = {"prompt_tokens": 1_000_000, "completion_tokens": 1_000_000, "total_tokens": 2_000_000}
    with OpenAIServer(Reply("4", usage=usage)) as server:
        service, _ = make(server, model="openai/gpt-4o-mini")
        message = service.generate("", USER)
    assert message.usage.cost_usd == pytest.approx(0.75)
    total = message.usage + message.usage
    assert total.cost_usd == pytest.approx(1.5)


def test_no_retry_statuses_are_raised_at_once_with_retry_after() -> None:
    with OpenAIServer([Reply(status=429, headers={"Retry-After": "3"}), Reply("4")]) as server:
        service, sleeps = make(server, no_retry_statuses={429, 503})
        with pytest.raises(TransientModelError) as caught:
            service.generate("", USER)
        assert caught.value.status_code == 429
        assert sleeps == []  # not slept in the thread
        assert caught.value.retry_after == 3.0
        assert len(server.requests) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_usage_missing_from_the_host_is_estimated_and_marked(stream: bool) -> None:
    """A host with no usage and no tokenize endpoint: a token per 3 characters, rounded up, and a
    stream's reply a token a chunk (``tests/reasoner/models/test_token_count.py`` has the tokenizers)."""
    with OpenAIServer(Reply("four words of answer", usage=None), chunk_size=8) as server:
        service, _ = make(server, stream=stream)
        message = service.generate("", USER)
    prompt = 7 + 4 + 3  # "user\nWhat is 2 + 2?" (19 characters), one message's framing, the reply's
    completion = 3 if stream else 7  # 20 characters: 3 chunks of 8, or 7 tokens of 3
    assert message.usage.model_dump() == {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "calls": 1,
        "cost_usd": 0.0,
        "counted_calls": 1,
    }


# -- native tool calls -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_native_tool_calls_are_returned(stream: bool) -> None:
    calls: list[dict[str, Any]] = [*TOOL_CALLS, {"name": "add", "arguments": {"a": 10, "b": 20}}]
    with OpenAIServer(Reply(None, tool_calls=calls), chunk_size=4) as server:
        service, _ = make(server, stream=stream)
        message = service.generate("sys", USER, tools=TOOLS)
        [request] = server.requests
    assert request["tools"] == [tool.openai_schema() for tool in TOOLS]
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls[:2]] == [
        ("call_add", "add", '{"a": 2, "b": 2}'),
        ("call_mul", "mul", '{"x": 3, "y": 7}'),
    ]
    third = message.tool_calls[2]
    assert (third.name, third.arguments) == ("add", '{"a": 10, "b": 20}') and third.id
    assert message.content == ""


def test_harmony_tool_calls_become_native_calls() -> None:
    text = (
        "<|channel|>analysis<|message|>I should add.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.add <|constrain|>json"
        '<|message|>{"a": 1, "b": 2}<|call|>'
    )
    with OpenAIServer(text) as server:
        service, _ = make(server, reasoning_parser="gpt-oss")
        message = service.generate("", USER)
        streamed, _ = make(server, reasoning_parser="gpt-oss", stream=True)
        again = streamed.generate("", USER)
    for reply in (message, again):
        assert reply.reasoning == "I should add."
        [call] = reply.tool_calls
        assert (call.name, call.arguments) == ("add", '{"a": 1, "b": 2}')
        assert call.id.startswith("call_")


# -- listeners -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply("<think>adding two and two</think>The answer is 4."), id="think-tags"),
        pytest.param(Reply("The answer is 4.", reasoning_content="adding two and two"), id="provider"),
    ],
)
def test_on_delta_concatenation_equals_the_result(reply: Reply) -> None:
    with OpenAIServer(reply, chunk_size=3) as server:
        service, _ = make(server, stream=True)
        deltas: list[tuple[str, str]] = []
        message = service.generate("", USER, on_delta=lambda r, c: deltas.append((r, c)))
    assert len(deltas) > 3
    assert "".join(r for r, _ in deltas) == message.reasoning == "adding two and two"
    assert "".join(c for _, c in deltas) == message.content == "The answer is 4."


def test_on_delta_without_streaming_is_called_once() -> None:
    with OpenAIServer("<think>hmm</think>4") as server:
        service, _ = make(server)
        deltas: list[tuple[str, str]] = []
        service.generate("", USER, on_delta=lambda r, c: deltas.append((r, c)))
    assert deltas == [("hmm", "4")]


# -- helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2.5"}, 2.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:10 GMT"}, 5.0),
        ({"retry-after": "Thu, 01 Jan 1970 00:00:01 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=5.0) == expected


def test_bad_settings_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError):
        LiteLlmModelService("")
    with pytest.raises(ConfigurationError):
        LiteLlmModelService(MODEL, timeout=0)
    with pytest.raises(ConfigurationError):
        LiteLlmModelService(MODEL, max_retries=-1)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        pytest.param("none", "<think>x</think>y", ("", "<think>x</think>y"), id="none-keeps-tags"),
        pytest.param("think", "<thinking>x</thinking>y", ("", "<thinking>x</thinking>y"), id="other-tag"),
        pytest.param("qwen3", "<think>x</think>y", ("x", "y"), id="qwen3"),
    ],
)
def test_litellm_own_think_split_does_not_override_the_parser(
    stream: bool, parser: str, text: str, expected: tuple[str, str]
) -> None:
    # LiteLLM moves a leading <think>/<thinking> block of a non-streamed reply into
    # reasoning_content by itself; the service reads the host's body so the parser decides.
    with OpenAIServer(Reply(text), chunk_size=4) as server:
        service, _ = make(server, stream=stream, reasoning_parser=parser)
        message = service.generate("", USER)
    assert (message.reasoning, message.content) == expected


def test_hosted_vllm_prefix_retries_and_reads_reasoning() -> None:
    script = [
        Reply(status=429, headers={"Retry-After": "2"}),
        Reply("Four.", reasoning_content="2 + 2", reasoning_field="reasoning"),
    ]
    with OpenAIServer(script) as server:
        service, sleeps = make(server, model="hosted_vllm/Qwen3-32B", thinking=False)
        message = service.generate("", USER)
        assert server.requests[-1]["model"] == "Qwen3-32B"
        assert server.requests[-1]["chat_template_kwargs"] == {"enable_thinking": False, "thinking": False}
    assert sleeps == [2.0]
    assert (message.reasoning, message.content, message.model) == ("2 + 2", "Four.", "hosted_vllm/Qwen3-32B")


def test_the_connection_pool_is_sized_to_the_worker(server: OpenAIServer) -> None:
    """A worker of many threads gets as many kept-alive connections (httpx's default is 100 at
    once, 20 kept alive), and the calls go through that client; a client of the user's is kept."""
    import threading

    import httpx

    from tandem.reasoner.models.litellm_setup import import_litellm, size_connection_pool

    litellm = import_litellm()
    before = litellm.client_session
    litellm.client_session = None
    try:
        assert size_connection_pool(150) is True
        client = litellm.client_session
        assert isinstance(client, httpx.Client)
        pool = client._transport._pool  # type: ignore[attr-defined]
        assert (pool._max_connections, pool._max_keepalive_connections) == (150, 150)
        assert size_connection_pool(10) is False and litellm.client_session is client

        model, _ = make(server)
        # Every reply waits until all 30 requests are in: with fewer connections than calls the
        # barrier breaks (a request would wait for a connection), whatever the machine's load.
        together = threading.Barrier(30, timeout=30)

        def answer(_: object) -> Reply:
            together.wait()
            return Reply(content="4")

        server.set_script(answer)
        threads = [threading.Thread(target=model.generate, args=("", USER)) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.in_flight_max == 30  # none waited for a connection
        assert len(pool.connections) == 30  # all kept alive for the next calls
    finally:
        if litellm.client_session is not None and litellm.client_session is not before:
            litellm.client_session.close()
        litellm.client_session = before


def test_the_async_connection_cap_is_litellms_aiohttp_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cap a worker compares with its threads when model calls run on its event loop."""
    from litellm import constants

    from tandem.reasoner.models.litellm_setup import async_connection_cap

    monkeypatch.setattr(constants, "AIOHTTP_CONNECTOR_LIMIT", 1000)
    monkeypatch.setattr(constants, "AIOHTTP_CONNECTOR_LIMIT_PER_HOST", 500)
    assert async_connection_cap() == 500
    monkeypatch.setattr(constants, "AIOHTTP_CONNECTOR_LIMIT", 300)
    assert async_connection_cap() == 300
    monkeypatch.setattr(constants, "AIOHTTP_CONNECTOR_LIMIT", 0)
    monkeypatch.setattr(constants, "AIOHTTP_CONNECTOR_LIMIT_PER_HOST", 0)
    assert async_connection_cap() is None


def test_a_model_litellm_does_not_price_is_entered_at_zero_once() -> None:
    from tandem.reasoner.models.litellm_setup import import_litellm, price_unpriced_model

    litellm = import_litellm()
    model = "hosted_vllm/tandem-test-unpriced-model"
    with pytest.raises(Exception):  # noqa: B017 - LiteLLM's own "not mapped" error
        litellm.cost_per_token(model=model, prompt_tokens=10, completion_tokens=10)
    assert price_unpriced_model(model) is True
    assert litellm.cost_per_token(model=model, prompt_tokens=10, completion_tokens=10) == (0.0, 0.0)
    assert price_unpriced_model(model) is False  # priced now: left alone
    priced = {"model": "openai/gpt-4o-mini", "prompt_tokens": 1000, "completion_tokens": 1000}
    before = litellm.cost_per_token(**priced)
    assert price_unpriced_model("openai/gpt-4o-mini") is False  # a priced model keeps its price
    assert litellm.cost_per_token(**priced) == before
    assert sum(before) > 0
    assert LiteLlmModelService(model)._cost(100, 100) == 0.0


def test_the_price_of_an_unpriced_model_is_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from tandem.reasoner.models.litellm_setup import import_litellm

    litellm = import_litellm()
    looked_up: list[str] = []
    real = litellm.cost_per_token

    def counting(**kwargs: Any) -> Any:
        looked_up.append(kwargs["model"])
        return real(**kwargs)

    monkeypatch.setattr(litellm, "cost_per_token", counting)
    unpriced = LiteLlmModelService("hosted_vllm/tandem-test-never-priced")
    assert [unpriced._cost(100, 100) for _ in range(3)] == [0.0, 0.0, 0.0]
    priced = LiteLlmModelService("openai/gpt-4o-mini")
    assert all(priced._cost(1000, 1000) > 0 for _ in range(3))
    assert looked_up.count("hosted_vllm/tandem-test-never-priced") == 1  # the map does not change
    assert looked_up.count("openai/gpt-4o-mini") == 3
