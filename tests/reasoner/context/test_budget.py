"""A role's context budget: the setting, else what the host reports (llama.cpp's ``/props``,
vLLM's ``/v1/models``, asked once per process and host), else LiteLLM's model map, else none; the
reserve for the reply; the conservative estimate and the per-message token cache."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tandem.reasoner.context.budget import budget_of, make_budget, reply_cap
from tandem.reasoner.context.counting import (
    ESTIMATE,
    MESSAGE_SLACK,
    CountingTokenizer,
    TokenCache,
    conservative_estimate,
)
from tandem.reasoner.context.window import forget_hosts, host_window
from tandem.reasoner.errors import ConfigurationError
from tandem.reasoner.messages import ModelMessage
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.testing import ScriptedModelService
from tests.openai_server import OpenAIServer


@pytest.fixture(autouse=True)
def _fresh_hosts() -> Iterator[None]:
    forget_hosts()
    yield
    forget_hosts()


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        pytest.param("", 0, id="empty"),
        pytest.param("abc defg", 3, id="three-letters-or-spaces-a-token-rounded-up"),
        pytest.param("2024-11-29", 10, id="a-token-per-digit-and-mark"),
        pytest.param('{"a": 1}\n', 8, id="json-marks-and-line-breaks"),
        pytest.param("日本語", 9, id="a-token-per-utf8-byte-of-other-characters"),
        pytest.param("café!", 4, id="mixed"),
    ],
)
def test_the_estimate_errs_high(text: str, tokens: int) -> None:
    assert conservative_estimate(text) == tokens


def test_a_stored_message_is_counted_once_per_tokenizer() -> None:
    seen: list[str] = []

    def count(text: str) -> int:
        seen.append(text)
        return len(text.split())

    tokenizer = CountingTokenizer("words", count)
    cache = TokenCache()
    message = ModelMessage(role="actor", round=3, content="<think>hidden words here</think>one two three")
    assert cache.message(tokenizer, message) == 3 + MESSAGE_SLACK  # thinking never goes back to a model
    assert cache.message(tokenizer, message) == 3 + MESSAGE_SLACK
    assert seen == ["one two three"]
    assert cache.message(ESTIMATE, message) == conservative_estimate("one two three") + MESSAGE_SLACK


def test_a_tokenizer_that_gives_no_count_is_estimated() -> None:
    tokenizer = CountingTokenizer("down", lambda text: None)
    assert tokenizer.count("abcdef") == conservative_estimate("abcdef")


def test_the_reserve_is_the_set_reply_cap_else_at_most_a_quarter_of_the_window() -> None:
    explicit = make_budget(4096, "setting", reply_reserve=2000, role="actor")
    assert explicit is not None and (explicit.reserve, explicit.limit) == (2000, 2096)
    capped = make_budget(4096, "host", max_tokens=8192)
    assert capped is not None and capped.reserve == 1024
    small = make_budget(4096, "host", max_tokens=300)
    assert small is not None and small.reserve == 300
    assert make_budget(None, "setting") is None
    with pytest.raises(
        ConfigurationError, match=r"TANDEM_THINKER_MAX_TOKENS=4096 leaves no room.*4096-token"
    ):
        make_budget(4096, "setting", reply_reserve=4096, role="thinker")


def test_a_scripted_model_has_the_budget_it_is_given() -> None:
    assert budget_of(ScriptedModelService(["x"])) is None
    budget = budget_of(ScriptedModelService(["x"], context_tokens=2048, role="thinker"))
    assert budget is not None and budget.limit == 1536 and budget.setting == "TANDEM_THINKER_CONTEXT_TOKENS"
    assert "1,536 tokens" in budget.describe() and "2,048-token window" in budget.describe()


def test_the_setting_wins_and_the_host_is_not_asked() -> None:
    with OpenAIServer("hi", props={"default_generation_settings": {"n_ctx": 2048}}) as server:
        model = LiteLlmModelService("openai/test-model", api_base=server.url, context_tokens=8000)
        budget = model.context_budget()
        assert budget is not None and (budget.window, budget.source) == (8000, "setting")
        assert server.discovery_requests == []


@pytest.mark.parametrize(
    "props",
    [
        pytest.param({"default_generation_settings": {"n_ctx": 2048}}, id="llama.cpp"),
        pytest.param({"n_ctx": 2048}, id="older-llama.cpp"),
    ],
)
def test_a_llama_cpp_host_reports_its_context_once_per_process(props: dict[str, object]) -> None:
    with OpenAIServer("hi", props=props) as server:
        first = LiteLlmModelService("openai/test-model", api_base=server.url, max_tokens=256, role="actor")
        budget = first.context_budget()
        assert budget is not None and (budget.window, budget.source, budget.reserve) == (2048, "host", 256)
        again = LiteLlmModelService("openai/test-model", api_base=server.url)
        assert again.context_budget() == make_budget(2048, "host")
        assert server.discovery_requests == ["/v1/models", "/props"]  # asked once, by the first service


def test_a_vllm_host_reports_max_model_len() -> None:
    with OpenAIServer("hi", max_model_len=32768, models=["Qwen3-8B"]) as server:
        assert host_window(server.url, "hosted_vllm/Qwen3-8B") == 32768
        assert server.discovery_requests == ["/v1/models"]


def test_a_host_that_says_nothing_is_unknown_and_asked_once() -> None:
    with OpenAIServer("hi") as server:
        model = LiteLlmModelService("openai/unmapped-test-model", api_base=server.url)
        assert model.context_budget() is None  # no setting, no host answer, not in the model map
        assert host_window(server.url, "openai/unmapped-test-model") is None
        assert server.discovery_requests == ["/v1/models"]  # not llama.cpp: no /props (a 404 in its log)


def test_a_host_that_cannot_be_reached_is_unknown() -> None:
    assert host_window("http://127.0.0.1:9/v1", "openai/x") is None


def test_without_a_host_answer_litellms_model_map_gives_the_window() -> None:
    model = LiteLlmModelService("gpt-4o-mini", max_tokens=1000)
    budget = model.context_budget()
    assert budget is not None and budget.source == "model map" and budget.window >= 100_000
    assert budget.reserve == 1000


def test_the_reply_cap_sent_is_never_more_than_the_budget_keeps_for_the_reply() -> None:
    assert reply_cap(4096, None) == 4096 and reply_cap(None, None) is None
    budget = make_budget(4096, "host")  # a quarter kept for the reply
    assert budget is not None and budget.reserve == 1024
    assert (reply_cap(4096, budget), reply_cap(None, budget), reply_cap(256, budget)) == (1024, 1024, 256)
    with OpenAIServer("hi", max_model_len=4096, models=["m"]) as server:
        model = LiteLlmModelService("hosted_vllm/m", api_base=server.url, max_tokens=4096)
        assert model.generate("", [{"role": "user", "content": "hi"}]).content == "hi"
        assert server.requests[-1]["max_tokens"] == 1024  # prompt + reply within the window vLLM reports
