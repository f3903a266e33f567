"""``warm_up_streaming``: after it, a process's first real streamed call loads nothing more, and
it sent no request. Each case runs in a fresh process: what LiteLLM loads is process-wide."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.reasoner.models import litellm_setup
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tests.openai_server import OpenAIServer, Reply

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import asyncio, json, sys
from tests.openai_server import OpenAIServer, Reply
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.models.litellm_setup import import_litellm, price_unpriced_model, warm_up_streaming
import tiktoken.registry

warm, use_async = sys.argv[1] == "warm", sys.argv[2] == "async"
import_litellm()
with OpenAIServer(Reply("four words of reply", reasoning_content="some thinking")) as host:
    model = "openai/self-hosted-model"
    if warm:
        warm_up_streaming(model, use_async=use_async)
    warm_requests = host.request_count
    price_unpriced_model(model)  # as the worker's runtime does before its first call
    service = LiteLlmModelService(model, api_base=host.url, api_key="k", stream=True)
    modules, encodings = set(sys.modules), set(tiktoken.registry.ENCODINGS)
    messages = [{"role": "user", "content": "hello"}]
    if use_async:
        reply = asyncio.run(service.agenerate("system", messages))
    else:
        reply = service.generate("system", messages)
    loaded = sorted(m for m in set(sys.modules) - modules if m.split(".")[0] in ("litellm", "tiktoken"))
    print(json.dumps({
        "warm_requests": warm_requests,
        "content": reply.content,
        "new_modules": loaded,
        "new_encodings": sorted(set(tiktoken.registry.ENCODINGS) - encodings),
    }))
"""


def first_call(warm: bool, mode: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, "warm" if warm else "cold", mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_after_the_warm_up_the_first_stream_loads_nothing_and_none_was_sent(mode: str) -> None:
    found = first_call(True, mode)
    assert found["warm_requests"] == 0  # LiteLLM answered the warm-up itself
    assert found["content"] == "four words of reply"
    assert (found["new_modules"], found["new_encodings"]) == ([], [])


def test_without_it_the_first_stream_loads_the_tokenizer() -> None:
    found = first_call(False, "async")  # what the warm-up spares the first reply
    assert found["new_encodings"] != [] and found["content"] == "four words of reply"


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_streamed_call_waits_for_a_warm_up_in_progress_before_its_request(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    ended: list[float] = []

    def slow_warm_up(model: str, *, use_async: bool) -> None:
        time.sleep(0.5)
        ended.append(time.monotonic())

    monkeypatch.setattr(litellm_setup, "warm_up_streaming", slow_warm_up)
    arrived: list[float] = []

    def reply(request: object) -> Reply:
        arrived.append(time.monotonic())
        return Reply("streamed after the warm-up")

    with OpenAIServer(reply) as host:
        service = LiteLlmModelService("openai/m", api_base=host.url, api_key="k", stream=True)
        litellm_setup.start_streaming_warm_up("openai/m", use_async=mode == "async")
        messages = [{"role": "user", "content": "hello"}]
        if mode == "async":
            message = asyncio.run(service.agenerate("system", messages))
        else:
            message = service.generate("system", messages)
    assert message.content == "streamed after the warm-up"
    assert len(ended) == 1 and arrived[0] >= ended[0]
