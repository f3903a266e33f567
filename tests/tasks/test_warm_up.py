"""A model worker's start: LiteLLM imported, and the HTTP pool its calls will use made ready."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tandem.broker_config import Settings
from tandem.reasoner.models import litellm_setup
from tandem.tasks import worker_signals


@pytest.mark.parametrize(("env", "sized"), [({}, False), ({"TANDEM_MODEL_LOOP": "0"}, True)])
def test_only_a_worker_calling_models_in_its_threads_sizes_their_pool(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, env: dict[str, str], sized: bool
) -> None:
    settings = Settings.from_env({"TANDEM_ACTOR_MODEL": "openai/m", **env})
    monkeypatch.setattr(
        worker_signals, "get_runtime", lambda: SimpleNamespace(settings=settings, concurrency=600)
    )
    pools: list[int] = []
    monkeypatch.setattr(litellm_setup, "size_connection_pool", lambda n: pools.append(n) or True)
    monkeypatch.setattr(litellm_setup, "async_connection_cap", lambda: 500)
    worker_signals._warm_up()
    assert pools == ([608] if sized else [])  # the loop's calls never use the threads' pool
    # On the loop, 600 threads against an HTTP client that opens 500 connections: said at start.
    assert ("AIOHTTP_CONNECTOR_LIMIT" in caplog.text) is not sized


@pytest.mark.parametrize(
    ("env", "warned"),
    [
        ({}, False),  # posted straight to the host: LiteLLM's connection limit does not apply
        ({"TANDEM_DIRECT_HTTP": "0"}, True),
        ({"TANDEM_ACTOR_STREAM": "1"}, False),  # streamed calls are posted straight too
        ({"TANDEM_ACTOR_STREAM": "1", "TANDEM_DIRECT_HTTP": "0"}, True),
    ],
)
def test_the_connection_limit_warning_is_only_for_calls_through_litellm(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, env: dict[str, str], warned: bool
) -> None:
    host = {"TANDEM_ACTOR_MODEL": "openai/m", "TANDEM_ACTOR_API_BASE": "http://127.0.0.1:9/v1"}
    settings = Settings.from_env({**host, "TANDEM_ACTOR_API_KEY": "k", **env})
    monkeypatch.setattr(
        worker_signals, "get_runtime", lambda: SimpleNamespace(settings=settings, concurrency=600)
    )
    monkeypatch.setattr(litellm_setup, "async_connection_cap", lambda: 500)
    worker_signals._warm_up()
    assert ("AIOHTTP_CONNECTOR_LIMIT" in caplog.text) is warned


@pytest.mark.parametrize(
    ("env", "warmed"),
    [
        pytest.param({"TANDEM_ACTOR_STREAM": "1"}, [("openai/m", True)], id="on-the-loop"),
        pytest.param(
            {"TANDEM_ACTOR_STREAM": "1", "TANDEM_MODEL_LOOP": "0"}, [("openai/m", False)], id="threads"
        ),
        pytest.param({}, [], id="not-streamed"),
    ],
)
@pytest.mark.parametrize("pool", ["threads", "prefork", "gevent"])
def test_a_worker_whose_role_streams_warms_the_streamed_path_up_before_it_takes_work(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], warmed: list[tuple[str, bool]], pool: str
) -> None:
    """Done in ``worker_init``, before the worker is ready, whatever its pool: in a thread beside
    the first steps it held the GIL for seconds on a loaded machine and their leases lapsed."""
    settings = Settings.from_env({"TANDEM_ACTOR_MODEL": "openai/m", **env})
    monkeypatch.setattr(
        worker_signals, "get_runtime", lambda: SimpleNamespace(settings=settings, concurrency=4)
    )
    monkeypatch.setattr(litellm_setup, "size_connection_pool", lambda n: True)
    calls: list[tuple[str, bool]] = []

    def warm(model: str, *, use_async: bool) -> None:
        time.sleep(0.2)
        calls.append((model, use_async))

    monkeypatch.setattr(litellm_setup, "warm_up_streaming", warm)
    worker_signals._warm_up(sender=SimpleNamespace(pool_cls=pool))
    assert calls == warmed  # done when worker_init returns: no thread left running beside the steps
    assert litellm_setup.wait_for_warm_up(0)  # so a streamed call never waits for one
