"""How long a model's context is, as its host or LiteLLM's model map says.

- ``host_window(api_base, model)``: ``GET /v1/models``, which every OpenAI-compatible host
  answers: vLLM's lists ``data[].max_model_len``; llama.cpp's own server (``owned_by:
  "llamacpp"``) is then asked ``GET /props`` for ``default_generation_settings.n_ctx`` (older
  versions: ``n_ctx``). No other host is sent a request it may not know (a 404 in its log).
  Each host is asked once per process (the answer, or that it gave none, is kept), with a short
  timeout: a host that does not answer in ``ASK_TIMEOUT`` seconds, or says nothing, has no known
  window.
- ``model_map_window(model)``: LiteLLM's model map (``max_input_tokens``, else ``max_tokens``),
  for a model LiteLLM's shipped list names (``cost_map.listed``): a worker that calls its hosts
  straight never imports LiteLLM to learn that a self-hosted model is not in it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["ASK_TIMEOUT", "forget_hosts", "host_window", "model_map_window"]

log = logging.getLogger("tandem.context")

ASK_TIMEOUT = 2.0
"""Seconds each discovery request may take."""

_known: dict[tuple[str, str], int | None] = {}
_lock = threading.Lock()


def _roots(api_base: str) -> tuple[str, str]:
    """The host's root (``api_base`` less ``/v1``) and its OpenAI base (with ``/v1``)."""
    base = api_base.rstrip("/")
    if base.endswith("/v1"):
        return base[: -len("/v1")], base
    return base, f"{base}/v1"


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _from_props(data: Any) -> int | None:
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    if isinstance(settings, dict) and _positive(settings.get("n_ctx")):
        return _positive(settings.get("n_ctx"))
    return _positive(data.get("n_ctx"))


def _entries(data: Any) -> list[dict[str, Any]]:
    entries = data.get("data") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _from_models(entries: list[dict[str, Any]], name: str) -> int | None:
    lengths = {str(e.get("id")): _positive(e.get("max_model_len")) for e in entries}
    if lengths.get(name):
        return lengths[name]
    known = [n for n in lengths.values() if n]
    return min(known) if known else None  # the model not listed by its name: the shortest


def _ask(api_base: str, model: str, api_key: str | None) -> int | None:
    import httpx

    root, openai_base = _roots(api_base)
    name = model.split("/", 1)[1] if "/" in model else model
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def get(client: httpx.Client, url: str) -> Any:
        try:
            answer = client.get(url)
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("asking %s for its context length failed: %s", url, exc)
            return None

    with httpx.Client(timeout=ASK_TIMEOUT, headers=headers) as client:
        entries = _entries(get(client, f"{openai_base}/models"))
        found = _from_models(entries, name)
        if found is None and any(e.get("owned_by") == "llamacpp" for e in entries):
            found = _from_props(get(client, f"{root}/props"))
    return found


def host_window(api_base: str | None, model: str, api_key: str | None = None) -> int | None:
    """The context length (tokens) the host at ``api_base`` reports for ``model``, or ``None``
    (no host, or it says nothing). Asked once per process and host."""
    if not api_base:
        return None
    key = (_roots(api_base)[0], model)
    with _lock:
        if key in _known:
            return _known[key]
    found = _ask(api_base, model, api_key)
    if found is None:
        log.info("model host %s reports no context length for %s", api_base, model)
    with _lock:
        _known.setdefault(key, found)
        return _known[key]


def forget_hosts() -> None:
    """Forget what hosts said (tests; a process that learns a host was restarted with another
    context)."""
    with _lock:
        _known.clear()


def model_map_window(model: str) -> int | None:
    """The context length LiteLLM's model map gives ``model`` (``max_input_tokens``, else
    ``max_tokens``), or ``None`` when it does not know the model."""
    from tandem.reasoner.models.cost_map import listed
    from tandem.reasoner.models.litellm_setup import import_litellm

    if not listed(model):
        return None
    try:
        info = import_litellm().get_model_info(model)
    except Exception:  # LiteLLM raises for a model it does not map
        return None
    for name in ("max_input_tokens", "max_tokens"):
        value = _positive(info.get(name) if isinstance(info, dict) else getattr(info, name, None))
        if value:
            return value
    return None
