"""A 200 answer that holds no chat completion is transient, and bounded (issue 22, item 5).

An HTML page from a proxy, JSON cut short, an empty body, JSON that is not a chat completion: on
every path (straight over aiohttp, through LiteLLM for ``openai/`` and ``hosted_vllm/`` models,
streamed or not, sync or async) it is retried with back-off, ``max_retries`` times, and then the call
fails with a ``ModelCallError`` (not transient: no caller reschedules it) that says what the host
sent, quotes its start (redacted), counts the tries and says what to check. Before, some paths
failed at once, one took the answer for an empty reply, and none said how many times it came.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models import direct_http
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.toolkit.redaction import register_secret
from tests.openai_server import MALFORMED, OpenAIServer, Reply

USER = [{"role": "user", "content": "What is 2 + 2?"}]
KEY = "sk-malformed-test-key-0042"
OPENAI = "openai/test-model"
GOOD = "The answer is 4."


class Waits(list[float]):
    """Records the back-off waits of both kinds of call; nothing waits."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.append(seconds)


def _allowed(call: Callable[[], Any]) -> Any:
    async def main() -> Any:
        direct_http.allow(asyncio.get_running_loop())
        try:
            return await call()
        finally:
            await direct_http.close()

    return asyncio.run(main())


PATHS = {
    # path -> (streamed, how the call is made)
    "direct": (False, lambda s: _allowed(lambda: s.agenerate("sys", USER))),
    "litellm": (False, lambda s: s.generate("sys", USER)),
    "litellm-async": (False, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "stream": (True, lambda s: s.generate("sys", USER)),
    "stream-async": (True, lambda s: asyncio.run(s.agenerate("sys", USER))),
    "stream-direct": (True, lambda s: _allowed(lambda: s.agenerate("sys", USER))),
}
CASES = [
    pytest.param(path, model, id=f"{path}-{model.split('/')[0]}")
    for path in PATHS
    for model in ("openai/test-model", "hosted_vllm/test-model")
    if model.startswith("openai") or path in ("litellm", "stream", "stream-direct")
]
KINDS = ["html", "truncated", "empty", "not-completion"]


def call(path: str, model: str, server: OpenAIServer, **kwargs: Any) -> tuple[ModelMessage, Waits]:
    """One call on ``path``; raises what the service raises. ``Waits`` are its back-off waits."""
    stream, make_call = PATHS[path]
    waits = Waits()
    service = LiteLlmModelService(
        model, api_base=server.url, api_key=KEY, stream=stream, sleep=waits, asleep=waits.asleep, **kwargs
    )
    return make_call(service), waits


def failing(path: str, model: str, server: OpenAIServer, **kwargs: Any) -> tuple[ModelCallError, Waits]:
    waits = Waits()
    stream, make_call = PATHS[path]
    service = LiteLlmModelService(
        model, api_base=server.url, api_key=KEY, stream=stream, sleep=waits, asleep=waits.asleep, **kwargs
    )
    with pytest.raises(ModelCallError) as caught:
        make_call(service)
    return caught.value, waits


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("path", "model"), CASES)
def test_garbage_twice_then_a_good_reply_is_the_reply(path: str, model: str, kind: str) -> None:
    script = [Reply.malformed(kind), Reply.malformed(kind), Reply(GOOD)]
    with OpenAIServer(script) as server:
        reply, waits = call(path, model, server)
        assert server.request_count == 3
    assert reply.content == GOOD
    assert len(waits) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("path", "model"), CASES)
def test_a_host_that_always_answers_garbage_fails_clearly(path: str, model: str, kind: str) -> None:
    with OpenAIServer(Reply.malformed(kind)) as server:
        error, waits = failing(path, model, server, max_retries=3, role="actor")
        assert server.request_count == 4
    assert not isinstance(error, TransientModelError), "a transient error would be rescheduled for ever"
    assert len(waits) == 3
    message = str(error)
    assert message.startswith(f"model {model!r} at {server.url}: no chat completion in 4 tries in a row")
    assert "the last answer was HTTP 200 with " in message
    assert "TANDEM_ACTOR_API_BASE" in message or "logs" in message
    assert KEY not in message


@pytest.mark.parametrize(
    ("path", "model", "kind", "words"),
    [
        ("direct", OPENAI, "html", "text/html that is not JSON: '<html><head><title>502 Bad Gateway"),
        ("litellm", "hosted_vllm/test-model", "html", "text/html that is not JSON: '<html><head><title>502"),
        ("litellm", OPENAI, "truncated", 'JSON that breaks off or is broken: \'{"id": "chatcmpl-1"'),
        ("direct", OPENAI, "empty", "with an empty body. The answer was cut short"),
        ("direct", OPENAI, "not-completion", '(no choices[0].message with text): \'{"status": "ok"'),
        ("stream", OPENAI, "html", "text/html instead of an event stream. A proxy, gateway"),
        ("stream-async", OPENAI, "broken-stream", "JSON that breaks off or is broken"),
        ("stream-direct", OPENAI, "broken-stream", "JSON that breaks off or is broken"),
        ("stream-direct", OPENAI, "html", "text/html instead of an event stream: '<html><head><title>502"),
    ],
)
def test_the_error_says_what_came(path: str, model: str, kind: str, words: str) -> None:
    with OpenAIServer(Reply.malformed(kind)) as server:
        error, _ = failing(path, model, server, max_retries=0)
    assert words in str(error)
    assert "in 1 try in a row" in str(error)


def test_the_quoted_answer_is_redacted() -> None:
    register_secret("registered-secret-4711")
    page = f"<html><body>key {KEY} password=hunter2-hunter2 registered-secret-4711</body></html>"
    with OpenAIServer(Reply(body=page, content_type="text/html")) as server:
        error, _ = failing("direct", "openai/test-model", server, max_retries=0)
    message = str(error)
    assert "<html><body>key ***" in message
    for secret in (KEY, "hunter2-hunter2", "registered-secret-4711"):
        assert secret not in message


def test_a_long_answer_is_quoted_short() -> None:
    page = "<html>" + "x" * 100_000 + "</html>"
    with OpenAIServer(Reply(body=page, content_type="text/html")) as server:
        error, _ = failing("direct", "openai/test-model", server, max_retries=0)
    assert len(str(error)) < 600 and "xxxx…'" in str(error)


@pytest.mark.parametrize("path", ["direct", "litellm", "stream-async", "stream-direct"])
def test_the_waits_fit_the_hold_and_are_never_handed_on(path: str) -> None:
    """A worker's ``retry_hold`` parks a step whose wait is too long; a malformed answer's waits are
    shortened instead: parked, its count would start again, and a host that always answers so would
    hold the job until its deadline."""
    with OpenAIServer(Reply.malformed("html")) as server:
        error, waits = failing(path, "openai/test-model", server, max_retries=4, retry_hold=0.5)
        assert server.request_count == 5
    assert not isinstance(error, TransientModelError)
    assert len(waits) == 4 and sum(waits) <= 0.5


def test_the_back_off_is_that_of_other_transient_errors() -> None:
    """Full jitter: before retry ``n + 1`` a wait drawn from ``uniform(0, backoff_base * 2**n)``."""
    with OpenAIServer(Reply.malformed("empty")) as server:
        _, waits = failing("litellm", "openai/test-model", server, max_retries=5, rng=random.Random(7))
    draw = random.Random(7)
    assert waits == [draw.uniform(0.0, 0.5 * 2**n) for n in range(5)]


@pytest.mark.parametrize("path", ["direct", "litellm", "stream", "stream-direct"])
def test_an_error_status_with_an_html_page_is_an_ordinary_server_error(path: str) -> None:
    """Only success answers are malformed: a 502 page from a proxy is a 5xx as before (transient,
    handed to the caller when retries are spent, so a worker reschedules it)."""
    page = MALFORMED["html"][0]
    with OpenAIServer(Reply(status=502, body=page, content_type="text/html")) as server:
        with pytest.raises(TransientModelError) as caught:
            call(path, "openai/test-model", server, max_retries=1)
        assert server.request_count == 2
    assert caught.value.status_code == 502
