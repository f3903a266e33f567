"""``HostModel`` on a ``ModelLoop``: a LiteLLM model's call runs as ``agenerate`` on the process's
loop and gives the reply, deltas, back-off and errors of the synchronous path; other models, the
off switch and gevent keep the synchronous path."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from tandem.broker_config import Settings
from tandem.reasoner.errors import ModelCallError, TransientModelError
from tandem.reasoner.models.litellm_service import LiteLlmModelService
from tandem.reasoner.testing import ScriptedModelService
from tandem.tasks.hosts.capacity import HostCapacity, HostLimits, snapshot
from tandem.tasks.hosts.host_model import BACKOFF_STATUSES, CapacityWait, HostModel
from tandem.tasks.hosts.model_loop import MODEL_LOOP, ModelLoop
from tandem.tasks.runtime import Runtime
from tests.openai_server import OpenAIServer, Reply
from tests.reasoner.models.test_litellm_async import MODEL, TOOL_CALLS, TOOLS, USER


class AsyncOnly(LiteLlmModelService):
    """A LiteLLM service whose synchronous path must not be taken."""

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the loop path must call agenerate, not generate")


@pytest.fixture
def loop() -> Iterator[ModelLoop]:
    model_loop = ModelLoop("test-host-model-loop")
    yield model_loop
    model_loop.stop()


def service(server: OpenAIServer, cls: type[LiteLlmModelService] = LiteLlmModelService, **kw: Any) -> Any:
    return cls(MODEL, api_base=server.url, api_key="sk-test", **kw)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(Reply("The answer is 4."), id="content"),
        pytest.param(Reply("<think>2 and 2 make 4</think>The answer is 4."), id="think-tags"),
        pytest.param(Reply("Calling.", reasoning_content="need a tool", tool_calls=TOOL_CALLS), id="tools"),
    ],
)
def test_the_loop_gives_the_reply_of_the_sync_path(reply: Reply, stream: bool, loop: ModelLoop) -> None:
    with OpenAIServer(reply, chunk_size=3) as server:
        sync = HostModel(service(server, stream=stream), role="actor", host=server.url)
        on_loop = HostModel(
            service(server, AsyncOnly, stream=stream), role="actor", host=server.url, model_loop=loop
        )
        assert sync.model_loop is None and on_loop.model_loop is loop
        expected = sync.generate("sys", USER, tools=TOOLS)
        got = on_loop.generate("sys", USER, tools=TOOLS)
    assert got.content == expected.content
    assert got.reasoning == expected.reasoning
    assert got.usage == expected.usage
    assert [(c.name, c.arguments) for c in got.tool_calls] == [
        (c.name, c.arguments) for c in expected.tool_calls
    ]


def test_streamed_deltas_arrive_in_the_calling_thread_in_order(loop: ModelLoop) -> None:
    content = "The answer is four, as two and two make four."
    with OpenAIServer(Reply(content, reasoning_content="add two and two"), chunk_size=4) as server:
        model = HostModel(service(server, AsyncOnly, stream=True), role="thinker", host="h", model_loop=loop)
        deltas: list[tuple[str, str, int]] = []
        caller = threading.get_ident()
        reply = model.generate("", USER, on_delta=lambda r, c: deltas.append((r, c, threading.get_ident())))
    assert len(deltas) > 5
    assert {ident for *_, ident in deltas} == {caller}
    assert "".join(r for r, _, _ in deltas) == reply.reasoning == "add two and two"
    assert "".join(c for _, c, _ in deltas) == reply.content == content


def test_a_429_with_retry_after_backs_the_fleet_off_as_before(loop: ModelLoop) -> None:
    capacity = HostCapacity(fakeredis.FakeRedis(), "t", HostLimits("h", max_in_flight=4))
    with OpenAIServer(Reply(status=429, headers={"Retry-After": "7"})) as server:
        inner = service(server, AsyncOnly, no_retry_statuses=BACKOFF_STATUSES)
        model = HostModel(inner, role="actor", host="h", capacity=capacity, model_loop=loop)
        with pytest.raises(CapacityWait) as caught:
            model.generate("", USER)
    wait = caught.value
    assert wait.wait.reason == "backoff"
    assert wait.retry_after == pytest.approx(7, abs=0.5)
    assert isinstance(wait.__cause__, TransientModelError) and wait.__cause__.status_code == 429
    snap = snapshot(capacity.redis, "t", capacity.limits)
    assert snap.in_flight == 0


@pytest.mark.parametrize(
    ("reply", "error", "status"),
    [
        pytest.param(Reply(status=401), ModelCallError, 401, id="401"),
        pytest.param(Reply(status=503), TransientModelError, 503, id="503-retries-spent"),
        pytest.param(
            Reply(status=429, headers={"Retry-After": "90"}), TransientModelError, 429, id="429-long"
        ),
    ],
)
def test_errors_reach_the_caller_as_from_the_sync_path(
    reply: Reply, error: type[Exception], status: int, loop: ModelLoop
) -> None:
    raised: list[BaseException] = []
    with OpenAIServer(reply) as server:
        for model_loop in (None, loop):
            inner = service(server, max_retries=0 if status == 503 else 2, backoff_max=1.0)
            model = HostModel(inner, role="actor", host="h", model_loop=model_loop)
            with pytest.raises(error) as caught:
                model.generate("", USER)
            raised.append(caught.value)
    sync, on_loop = raised
    assert type(on_loop) is type(sync)
    assert str(on_loop) == str(sync)
    assert isinstance(on_loop, ModelCallError) and isinstance(sync, ModelCallError)
    assert on_loop.status_code == sync.status_code == status
    assert getattr(on_loop, "retry_after", None) == getattr(sync, "retry_after", None)


def test_calls_from_many_threads_run_concurrently_on_the_loop(loop: ModelLoop) -> None:
    with OpenAIServer("ok", latency=0.5) as server:
        model = HostModel(service(server, AsyncOnly), role="actor", host="h", model_loop=loop)
        model.generate("", USER)  # LiteLLM's first call imports and builds its client
        replies: list[str] = []
        threads = [
            threading.Thread(target=lambda: replies.append(model.generate("", USER).content))
            for _ in range(20)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        assert replies == ["ok"] * 20
        assert elapsed < 3.0, f"20 calls of 0.5 s took {elapsed:.1f}s: they did not overlap"
        assert server.in_flight_max >= 10


def test_models_without_litellm_keep_the_sync_path(loop: ModelLoop) -> None:
    scripted = ScriptedModelService(["The answer is 4."])
    model = HostModel(scripted, role="actor", host="demo", model_loop=loop)
    assert model.model_loop is None
    assert model.generate("", USER).content == "The answer is 4."
    assert "test-host-model-loop" not in {t.name for t in threading.enumerate()}


def test_under_gevent_the_sync_path_is_kept(loop: ModelLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    monkey = types.SimpleNamespace(is_module_patched=lambda name: name == "threading")
    monkeypatch.setitem(sys.modules, "gevent", types.SimpleNamespace(monkey=monkey))
    monkeypatch.setitem(sys.modules, "gevent.monkey", monkey)
    model = HostModel(
        LiteLlmModelService(MODEL, api_base="http://h/v1"), role="actor", host="h", model_loop=loop
    )
    assert model.model_loop is None


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("1", True), ("0", False), ("false", False)])
def test_the_runtime_gives_litellm_models_the_process_loop_unless_switched_off(
    value: str | None, expected: bool
) -> None:
    env = {"TANDEM_ACTOR_MODEL": MODEL, "TANDEM_ACTOR_API_BASE": "http://h:8000/v1"}
    if value is not None:
        env["TANDEM_MODEL_LOOP"] = value
    settings = Settings.from_env(env)
    assert settings.model_loop is expected
    runtime = Runtime(settings)
    actor = runtime.model("actor")
    assert isinstance(actor, HostModel)
    assert actor.model_loop is (MODEL_LOOP if expected else None)
    thinker = runtime.model("thinker")  # no model configured: the demo model, never on the loop
    assert isinstance(thinker, HostModel) and thinker.model_loop is None


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("0", False), ("true", True)])
def test_the_runtime_tells_the_process_loop_whether_calls_may_skip_litellm(
    value: str | None, expected: bool
) -> None:
    env = {"TANDEM_ACTOR_MODEL": MODEL, "TANDEM_ACTOR_API_BASE": "http://h:8000/v1"}
    if value is not None:
        env["TANDEM_DIRECT_HTTP"] = value
    settings = Settings.from_env(env)
    assert settings.direct_http is expected
    before = MODEL_LOOP.direct_http
    try:
        MODEL_LOOP.direct_http = not expected
        Runtime(settings).model("actor")  # set before any call starts the loop
        assert MODEL_LOOP.direct_http is expected
    finally:
        MODEL_LOOP.direct_http = before
