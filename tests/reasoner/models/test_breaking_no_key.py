"""docs/model-hosts.md, "An ``openai/`` model needs a key, even a dummy one": with an
``openai/<name>`` model, an API base and neither ``TANDEM_<ROLE>_API_KEY`` nor ``OPENAI_API_KEY``,
the first call fails at once (not retried) naming ``TANDEM_<ROLE>_API_KEY``; ``hosted_vllm/<name>``
needs no key. Tried on every path a call can take: sync and async, streamed and not."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tests.openai_server import OpenAIServer, Reply

USER = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(Reply(content="4")) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_key_anywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "HOSTED_VLLM_API_KEY", "TANDEM_ACTOR_API_KEY", "TANDEM_THINKER_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def _call(service: LiteLlmModelService, mode: str) -> object:
    if mode == "sync":
        return service.generate("", USER)
    return asyncio.run(service.agenerate("", USER))


@pytest.mark.parametrize("role", ["actor", "thinker"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("key", [None, ""], ids=["no-key", "empty-key"])
def test_an_openai_model_without_a_key_fails_at_once_naming_the_setting(
    server: OpenAIServer, role: str, stream: bool, mode: str, key: str | None
) -> None:
    sleeps: list[float] = []

    async def asleep(seconds: float) -> None:
        sleeps.append(seconds)

    service = LiteLlmModelService(
        "openai/m",
        api_base=server.url,
        api_key=key,
        stream=stream,
        max_retries=3,
        role=role,
        sleep=sleeps.append,
        asleep=asleep,
    )
    with pytest.raises(ModelCallError) as caught:
        _call(service, mode)
    assert not isinstance(caught.value, TransientModelError), repr(caught.value)
    assert sleeps == [], f"retried after {sleeps}"
    assert server.request_count == 0
    assert f"TANDEM_{role.upper()}_API_KEY" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hosted_vllm_model_needs_no_key(server: OpenAIServer, stream: bool, mode: str) -> None:
    service = LiteLlmModelService("hosted_vllm/m", api_base=server.url, stream=stream, role="actor")
    reply = _call(service, mode)
    assert getattr(reply, "content", None) == "4"
    assert server.request_count == 1
