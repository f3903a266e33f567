"""``tandem.reasoner.models.cost_map``: whether LiteLLM prices a model, told without importing it.

A worker whose model calls all go straight to a self-hosted OpenAI-compatible host never imports
LiteLLM (two to five seconds of CPU and about 130 MB at its start): its replies cost 0, and the
model is entered at 0 in LiteLLM's map if LiteLLM is imported later after all. A model the
shipped price list names still has its replies priced by LiteLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from tandem.broker_config import Settings
from tandem.reasoner.models import cost_map, litellm_setup
from tandem.tasks import worker_signals
from tests.openai_server import OpenAIServer, Reply


@pytest.mark.parametrize(
    ("model", "priced"),
    [
        ("openai/gpt-4o", True),
        ("gpt-4o-mini", True),
        ("deepseek/deepseek-chat", True),
        ("openai/thinker-model", False),
        ("hosted_vllm/our-own-finetune-v7", False),
    ],
)
def test_listed_reads_the_shipped_price_list_as_litellm_would_price(
    monkeypatch: pytest.MonkeyPatch, model: str, priced: bool
) -> None:
    litellm = litellm_setup.import_litellm()
    with monkeypatch.context() as m:
        m.delitem(sys.modules, "litellm")  # answered from the file
        cost_map._in_file.cache_clear()
        from_file = cost_map.listed(model)
    assert from_file is priced
    assert cost_map.listed(model) is priced  # LiteLLM imported: asked itself
    if priced:
        assert sum(litellm.cost_per_token(model=model, prompt_tokens=1000, completion_tokens=1000)) > 0


def test_a_list_that_cannot_be_read_counts_every_model_as_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "litellm", raising=False)
    monkeypatch.setattr(cost_map, "_PRICE_FILE", "no-such-file.json")
    cost_map._names.cache_clear()
    cost_map._in_file.cache_clear()
    try:
        assert cost_map.listed("openai/thinker-model") is True  # LiteLLM is asked, as before
    finally:
        monkeypatch.undo()
        cost_map._names.cache_clear()
        cost_map._in_file.cache_clear()


_DIRECT_CALL = textwrap.dedent(
    """
    import asyncio, json, sys
    from tandem.reasoner.models import direct_http, litellm_setup
    from tandem.reasoner.models.litellm_service import LiteLlmModelService

    model, url = sys.argv[1], sys.argv[2]
    litellm_setup.price_unpriced_model(model)  # what a worker's runtime does before its calls
    service = LiteLlmModelService(model, api_base=url, api_key="k")

    async def main():
        direct_http.allow(asyncio.get_running_loop())  # as a worker's model loop does
        try:
            return await service.agenerate("sys", [{"role": "user", "content": "2 + 2?"}])
        finally:
            await direct_http.close()

    reply = asyncio.run(main())
    print(json.dumps({"imported": "litellm" in sys.modules, "cost": reply.usage.cost_usd,
                      "content": reply.content}))
    """
)


def test_a_direct_call_to_a_self_hosted_model_never_imports_litellm() -> None:
    with OpenAIServer(Reply("4", usage={"prompt_tokens": 11, "completion_tokens": 5})) as server:
        done = subprocess.run(
            [sys.executable, "-c", _DIRECT_CALL, "openai/our-own-model", server.url],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"imported": False, "cost": 0.0, "content": "4"}


def test_a_model_left_unpriced_is_entered_at_0_once_litellm_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    litellm = litellm_setup.import_litellm()
    model = "hosted_vllm/tandem-test-deferred-price"
    monkeypatch.setattr(litellm_setup, "_litellm", None)  # as in a worker that has not imported it
    monkeypatch.setattr(litellm_setup, "_to_price", set())
    assert litellm_setup.price_unpriced_model(model) is True
    assert litellm_setup._to_price == {model}  # left for the import
    with pytest.raises(Exception):  # noqa: B017 - LiteLLM raises its own kinds for an unknown model
        litellm.cost_per_token(model=model, prompt_tokens=10, completion_tokens=10)
    assert litellm_setup.import_litellm() is litellm
    assert sum(litellm.cost_per_token(model=model, prompt_tokens=10, completion_tokens=10)) == 0.0
    assert litellm_setup._to_price == set()


@pytest.mark.parametrize(
    ("env", "imported"),
    [
        pytest.param({}, False, id="direct-self-hosted"),
        pytest.param({"TANDEM_ACTOR_MODEL": "openai/gpt-4o"}, True, id="priced-model"),
        pytest.param({"TANDEM_ACTOR_STREAM": "1"}, False, id="streamed-direct"),
        pytest.param({"TANDEM_ACTOR_STREAM": "1", "TANDEM_DIRECT_HTTP": "0"}, True, id="streamed-litellm"),
        pytest.param({"TANDEM_DIRECT_HTTP": "0"}, True, id="direct-off"),
        pytest.param({"TANDEM_MODEL_LOOP": "0"}, True, id="calls-in-threads"),
    ],
)
def test_a_model_worker_imports_litellm_at_start_only_where_its_calls_need_it(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], imported: bool
) -> None:
    host = {
        "TANDEM_ACTOR_MODEL": "openai/our-own-model",
        "TANDEM_ACTOR_API_BASE": "http://127.0.0.1:9/v1",
        "TANDEM_ACTOR_API_KEY": "k",
    }
    settings = Settings.from_env({**host, **env})
    monkeypatch.setattr(worker_signals, "_warm_up_streams", lambda settings, roles: None)
    monkeypatch.setattr(
        worker_signals, "get_runtime", lambda: SimpleNamespace(settings=settings, concurrency=4)
    )
    imports: list[bool] = []
    monkeypatch.setattr(litellm_setup, "import_litellm", lambda: imports.append(True))
    monkeypatch.setattr(litellm_setup, "size_connection_pool", lambda n: True)
    monkeypatch.setattr(litellm_setup, "async_connection_cap", lambda: 500)
    worker_signals._warm_up(sender=SimpleNamespace(pool_cls="threads"))
    assert bool(imports) is imported
