"""LiteLLM in this process: imported once and quietly, its price map, its connection pools.

Everything here acts on the LiteLLM module, which is process-wide: ``import_litellm`` (on first use,
not with this module: it costs a second or two of CPU), ``price_unpriced_model`` (a self-hosted
model entered at 0 a token), ``size_connection_pool``, ``async_connection_cap`` and
``warm_up_streaming`` / ``start_streaming_warm_up`` (what a worker sets, checks or does at start).
``LiteLlmModelService`` calls LiteLLM through ``import_litellm``, and a streamed call first waits for
a warm-up in progress (``wait_for_warm_up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import threading
import time
from types import ModuleType

from tandem.reasoner.models.cost_map import listed

__all__ = [
    "WARM_UP_WAIT",
    "async_connection_cap",
    "import_litellm",
    "price_unpriced_model",
    "size_connection_pool",
    "start_streaming_warm_up",
    "wait_for_warm_up",
    "warm_up_streaming",
]

_litellm: ModuleType | None = None
_litellm_lock = threading.Lock()
_warmed = threading.Event()
_warmed.set()  # set while no warm-up is in progress
_to_price: set[str] = set()
"""Models ``price_unpriced_model`` enters at 0 once LiteLLM is imported."""

WARM_UP_WAIT = 30.0
"""The longest a streamed call waits for a warm-up in progress (seconds)."""


def import_litellm() -> ModuleType:
    """Import LiteLLM once, quietly: no "Give Feedback / Get Help" banner printed per error."""
    global _litellm
    if _litellm is None:
        with _litellm_lock:
            if _litellm is None:
                # LiteLLM fetches its model price list from the internet on import (with retries
                # and sleeps) unless told to use the copy it ships; a worker must not wait on that.
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                _litellm = litellm
                for model in sorted(_to_price):  # left for the import by ``price_unpriced_model``
                    _price_at_zero(litellm, model)
                _to_price.clear()
    return _litellm


def price_unpriced_model(model: str) -> bool:
    """Enter ``model`` in LiteLLM's cost map at 0 a token when the map does not price it (a
    self-hosted model); ``True`` if it did.

    LiteLLM prices every reply: for a model its map does not know, it works that out anew on each
    call (about a dozen lookups through its fallback rules, then a zero-cost diagnostic), about a
    third of its own CPU per call. Such a call costs 0 in tandem either way (``JobResult.usage``,
    ``max_cost_usd``); a price the map already has, or one registered later, is left alone.

    LiteLLM is not imported for it: a model the price list LiteLLM ships does not name
    (``cost_map.listed``) is entered when LiteLLM is imported, if it ever is in this process (a
    worker whose calls all go straight to their host never imports it).
    """
    if _litellm is None and not listed(model):
        with _litellm_lock:
            if _litellm is None:
                _to_price.add(model)
                return True
    return _price_at_zero(import_litellm(), model)


def _price_at_zero(litellm: ModuleType, model: str) -> bool:
    try:
        litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
        return False
    except Exception:  # not priced: LiteLLM raises
        pass
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    free = (
        "input_cost_per_token",
        "output_cost_per_token",
        "cache_creation_input_token_cost",
        "cache_read_input_token_cost",
    )
    litellm.register_model(
        {model: {"litellm_provider": provider, "mode": "chat", **dict.fromkeys(free, 0.0)}}
    )
    return True


def size_connection_pool(connections: int) -> bool:
    """Let LiteLLM's synchronous calls through the OpenAI SDK (the ``openai/`` provider, and any
    other that uses ``litellm.client_session``) hold up to ``connections`` HTTP connections at once,
    all kept alive (a worker passes its thread count). ``False`` if the caller set
    ``litellm.client_session`` already (left alone).

    LiteLLM's own client takes httpx's defaults: 100 connections at once, 20 kept alive, so a
    worker of 200 threads had half of them wait for a connection, and opened a new one for most
    calls. (Providers that go through LiteLLM's own HTTP handler, e.g. ``hosted_vllm/``, keep
    those defaults: a transport shared through ``litellm.sync_transport`` is closed with whichever
    of the handler's clients closes first.)
    """
    litellm = import_litellm()
    if litellm.client_session is not None:
        return False
    import httpx
    from litellm.llms.custom_httpx.http_handler import get_ssl_configuration, http2_enabled

    client = httpx.Client(
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        verify=get_ssl_configuration(),
        follow_redirects=True,
        http2=http2_enabled(),
    )
    setattr(litellm, "client_session", client)  # noqa: B010 - a module attribute mypy cannot see
    return True


def async_connection_cap() -> int | None:
    """The most HTTP connections LiteLLM's asyncio calls (``acompletion``, over its aiohttp
    transport) open to one host at once: the smaller of ``AIOHTTP_CONNECTOR_LIMIT_PER_HOST`` (500
    by default) and ``AIOHTTP_CONNECTOR_LIMIT`` (1,000), environment variables LiteLLM reads when
    imported; ``None`` when both are 0 (no cap). Calls beyond it wait for a connection."""
    import_litellm()
    from litellm.constants import AIOHTTP_CONNECTOR_LIMIT, AIOHTTP_CONNECTOR_LIMIT_PER_HOST

    caps = [int(c) for c in (AIOHTTP_CONNECTOR_LIMIT, AIOHTTP_CONNECTOR_LIMIT_PER_HOST) if int(c) > 0]
    return min(caps) if caps else None


def warm_up_streaming(model: str, *, use_async: bool) -> None:
    """Make one streamed completion of ``model`` that LiteLLM answers itself (``mock_response``: no
    request leaves the process, no key is needed) and read it to its end: ``litellm.acompletion``
    on a loop of its own when ``use_async`` (the worker's model loop calls that way), else
    ``litellm.completion``.

    LiteLLM sets up much of its streaming on the first stream of the process: it imports more of
    itself and loads the model's tokenizer to count the prompt's tokens (0.5 to 3 s of CPU),
    before the first chunk is handed over, so a fresh worker's first reply arrived in one lump
    after that pause. The model is priced first (``price_unpriced_model``), as a worker does
    before its calls: which tokenizer LiteLLM picks depends on it. What is loaded is
    process-wide, not tied to the loop used here: the calls later made on the worker's own loop
    find it ready. Raises whatever LiteLLM raises.
    """
    litellm = import_litellm()
    price_unpriced_model(model)  # as before every real call: the prompt's tokenizer depends on it
    request = {
        "model": model,
        "messages": [{"role": "user", "content": "warm-up"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "mock_response": "warm-up",
    }
    _import_http_logging()
    if not use_async:
        for _ in litellm.completion(**request):
            pass
        return

    async def read() -> None:
        async for _ in await litellm.acompletion(**request):
            pass

    loop = asyncio.new_event_loop()  # not set as the thread's loop: nothing else sees it
    try:
        loop.run_until_complete(read())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def start_streaming_warm_up(model: str, *, use_async: bool) -> threading.Thread:
    """Run ``warm_up_streaming`` in a daemon thread; until it ends, a streamed call waits for it
    before sending its request (``wait_for_warm_up``), so its reply streams from its first chunk
    rather than pausing mid-stream while LiteLLM loads what the warm-up is loading. A failure is
    logged, and the calls go on without it."""
    log = logging.getLogger("tandem.worker")

    def run() -> None:
        started = time.monotonic()
        try:
            warm_up_streaming(model, use_async=use_async)
            log.info("LiteLLM's streaming warmed up in %.2f s", time.monotonic() - started)
        except Exception:  # a missed warm-up only makes the first reply slower
            log.warning("could not warm up LiteLLM's streaming", exc_info=True)
        finally:
            _warmed.set()

    _warmed.clear()
    thread = threading.Thread(target=run, name="tandem-warm-up", daemon=True)
    thread.start()
    return thread


def wait_for_warm_up(timeout: float = WARM_UP_WAIT) -> bool:
    """Wait for a warm-up in progress (``start_streaming_warm_up``), at most ``timeout`` seconds;
    ``True`` when none is (any more)."""
    return _warmed.wait(timeout)


def _import_http_logging() -> None:
    """What LiteLLM's HTTP calls import on first use, which a mocked call does not reach (a few
    milliseconds; a name gone in a later LiteLLM is skipped, and the warm-up test says so)."""
    with contextlib.suppress(ImportError):
        importlib.import_module("litellm._service_logger")
