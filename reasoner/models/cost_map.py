"""Whether LiteLLM's price list knows a model, answered without importing LiteLLM.

Importing LiteLLM costs a worker two to five seconds of CPU and about 130 MB. A worker whose model
calls all go straight to an OpenAI-compatible host (``tandem.reasoner.models.direct_http``) needs
LiteLLM for one thing only: the price of each reply, which for a self-hosted model it does not
know anyway. ``listed`` reads the price list LiteLLM ships (the file it reads itself, told to stay
offline by ``litellm_setup.import_litellm``) to tell such a model apart, so its worker prices its
replies at 0 without the import; a model the list names is priced by LiteLLM as before.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path

__all__ = ["listed"]

_PRICE_FILE = "model_prices_and_context_window_backup.json"


@functools.cache
def _names() -> frozenset[str] | None:
    """The model names of LiteLLM's shipped price list, lower-cased; ``None`` when it cannot be
    read (no LiteLLM installed, a later LiteLLM that moved it): then every model counts as listed."""
    try:
        spec = importlib.util.find_spec("litellm")  # finds the package without importing it
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        for folder in folders:
            path = Path(folder) / _PRICE_FILE
            if path.is_file():
                return frozenset(name.lower() for name in json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ImportError):
        pass
    return None


def _candidates(model: str) -> set[str]:
    """The names LiteLLM could look ``model`` up by: as written, without its provider prefix, and
    its last path segment (``openai/org/name`` -> ``org/name``, ``name``)."""
    model = model.lower()
    names = {model}
    if "/" in model:
        names.add(model.split("/", 1)[1])
        names.add(model.rsplit("/", 1)[1])
    return names


def listed(model: str) -> bool:
    """``True`` unless LiteLLM's shipped price list certainly does not price ``model``: no entry
    is named like it (as written, without its provider, or by its last segment). When LiteLLM is
    imported already, it is asked instead (a price registered at run time counts); when the list
    cannot be read, every model counts as listed (LiteLLM is asked, as before)."""
    litellm = sys.modules.get("litellm")
    if litellm is not None:
        try:
            litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
            return True
        except Exception:  # LiteLLM raises for a model it cannot price
            return False
    return _in_file(model)


@functools.lru_cache(maxsize=64)
def _in_file(model: str) -> bool:
    names = _names()
    if names is None:
        return True
    candidates = _candidates(model)
    return any(name in names for name in candidates) or any(
        name.endswith("/" + candidate) for candidate in candidates for name in names
    )
