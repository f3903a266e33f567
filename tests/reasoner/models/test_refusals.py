"""Which error answers a call retries and which fail it at once (``tandem.reasoner.models.refusals``).

Each class of answer, from the local OpenAI-compatible server, through LiteLLM and on the direct
path, streamed and not: a refusal is one request and a ``ModelCallError`` with the host's words
and what to do; a transient answer is retried (the second request gets the reply).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.models.refusals import refusal, summary
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_direct_http import run_allowed
from tests.reasoner.models.test_litellm_async import USER, ASleeps
from tests.reasoner.models.test_wire import LLAMA_CPP_VALIDATION

MODEL = "openai/smollm2"
KEY = "sk-refusals"

LLAMA_CPP_CONTEXT = (
    "This model's maximum context length is 512 tokens. However, you requested 4643 tokens "
    "(547 in the messages, 4096 in the completion). Please reduce the length of the messages or completion."
)

PATHS: dict[str, tuple[bool, Callable[[LiteLlmModelService], ModelMessage]]] = {
    "litellm": (False, lambda s: s.generate("sys", USER)),
    "litellm-stream": (True, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "direct": (False, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
    "direct-stream": (True, lambda s: run_allowed(lambda: s.agenerate("sys", USER))),
}


def call(server: OpenAIServer, path: str, **kwargs: Any) -> tuple[ModelMessage, ASleeps]:
    stream, make_call = PATHS[path]
    asleeps = ASleeps()
    sleeps: list[float] = []
    service = LiteLlmModelService(
        MODEL,
        api_base=server.url,
        api_key=KEY,
        stream=stream,
        role="actor",
        sleep=sleeps.append,
        asleep=asleeps,
        **kwargs,
    )
    reply = make_call(service)
    asleeps.extend(sleeps)
    return reply, asleeps


REFUSED = [
    pytest.param(400, "temperature must be at most 2", "parameters", id="400"),
    pytest.param(401, "Incorrect API key provided", "TANDEM_ACTOR_API_KEY", id="401"),
    pytest.param(403, "Model access denied", "permissions", id="403"),
    pytest.param(404, "The model `nope` does not exist", "GET <api_base>/models", id="404"),
    pytest.param(422, "messages: field required", "parameters", id="422"),
    pytest.param(
        500,
        LLAMA_CPP_VALIDATION,
        "request schema refused the request",
        id="500-validation-error",
    ),
    pytest.param(
        500,
        "'dict object' has no attribute 'content'",
        "chat template failed on the request (a retry sends the same): start the host with a chat "
        "format that takes tool calls (llama-cpp-python: --chat_format chatml-function-calling), or "
        "set TANDEM_ACTOR_FUNCTION_CALLING=prompt",
        id="500-template",
    ),
    pytest.param(
        500,
        "Automatic streaming tool choice is not supported",
        "TANDEM_ACTOR_STREAM, TANDEM_ACTOR_TOOL_CHOICE and TANDEM_ACTOR_FUNCTION_CALLING",
        id="500-not-supported",
    ),
    pytest.param(
        400,
        LLAMA_CPP_CONTEXT,
        "does not fit the model's context window: shorten the job's goal or context, lower "
        "TANDEM_ACTOR_MAX_TOKENS, start the host with a larger context (llama.cpp: --n_ctx or -c; "
        "vLLM: --max-model-len), or use a model with a larger window",
        id="400-context",
    ),
    pytest.param(
        500,
        "the request exceeds the available context size, try increasing it",
        "context window",
        id="500-context",
    ),
]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("status", "host_says", "advice"), REFUSED)
def test_a_refusal_fails_the_call_at_once_with_the_hosts_words(
    path: str, status: int, host_says: str, advice: str
) -> None:
    with OpenAIServer([Reply(status=status, error=host_says), Reply("never sent")]) as server:
        with pytest.raises(ModelCallError) as caught:
            call(server, path)
        assert server.request_count == 1
    error = caught.value
    assert not isinstance(error, TransientModelError)
    message = str(error)
    shown = summary(host_says).rstrip(". ")
    assert f"model '{MODEL}' at {server.url}: HTTP {status}: {shown}" in message
    assert advice in message and KEY not in message
    assert error.status_code == status


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(
    ("status", "host_says"),
    [
        pytest.param(408, "Request timed out", id="408"),
        pytest.param(409, "Conflict: the session is busy", id="409"),
        pytest.param(429, "Rate limit reached for tokens per min", id="429"),
        pytest.param(500, "The server had an error while processing your request", id="500"),
        pytest.param(502, "Bad gateway", id="502"),
        pytest.param(503, "The engine is currently overloaded", id="503"),
    ],
)
def test_a_transient_answer_is_retried(path: str, status: int, host_says: str) -> None:
    with OpenAIServer([Reply(status=status, error=host_says), Reply("4")]) as server:
        reply, waits = call(server, path)
        assert server.request_count == 2
    assert reply.content == "4" and len(waits) == 1


def test_a_validation_error_is_said_field_by_field() -> None:
    assert summary(LLAMA_CPP_VALIDATION) == (
        "2 validation errors: messages.2.content: Input should be a valid string (got None)"
    )
    only_literals = (
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 0, 'role'), "
        "'msg': \"Input should be 'user'\", 'input': 'robot'}"
    )
    assert (
        summary(only_literals) == "1 validation error: messages.0.role: Input should be 'user' (got 'robot')"
    )
    assert summary("plain words") == "plain words"


@pytest.mark.parametrize(
    ("message", "status", "kind"),
    [
        pytest.param(LLAMA_CPP_CONTEXT, 400, "context", id="llama-cpp-python"),
        pytest.param("This model's maximum context length is 8192 tokens", 400, "context", id="openai-vllm"),
        pytest.param("prompt is too long: 201000 tokens > 200000 maximum", 400, "context", id="anthropic"),
        pytest.param("the request exceeds the available context size", 400, "context", id="llama.cpp"),
        pytest.param(
            "tokens per min (TPM): limit 30000, context_length", 429, None, id="rate-limit-names-tokens"
        ),
        pytest.param(LLAMA_CPP_VALIDATION, 500, "validation", id="pydantic"),
        pytest.param("1 validation error for ChatRequest", 503, "validation", id="pydantic-single"),
        pytest.param("Field required", 500, "validation", id="field-required"),
        pytest.param("'dict object' has no attribute 'content'", 500, "template", id="jinja"),
        pytest.param("jinja2.exceptions.TemplateError: bad role", 500, "template", id="template-error"),
        pytest.param(
            "Automatic streaming tool choice is not supported", 500, "unsupported", id="unsupported"
        ),
        pytest.param("Field required", 400, None, id="4xx-left-to-the-status"),
        pytest.param("CUDA out of memory", 500, None, id="5xx-transient"),
        pytest.param("upstream connect error", 502, None, id="gateway"),
    ],
)
def test_refusal_kinds(message: str, status: int, kind: str | None) -> None:
    assert refusal(message, status) == kind
