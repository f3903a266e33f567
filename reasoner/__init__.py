"""The reasoning core: model services, parsers, prompts, memory and the mono/dual/ReAct reasoners.

Nothing here imports Celery; everything runs in-process on its own. Names are loaded on first
use, so importing one piece does not import the rest (LiteLLM in particular is slow to import).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "ConfigurationError": "reasoner.errors",
    "DualModelReasoner": "reasoner.dual",
    "FunctionCallResult": "reasoner.messages",
    "FunctionCallStatus": "reasoner.messages",
    "InMemoryReasonerMemory": "reasoner.memory",
    "LiteLlmModelService": "reasoner.litellm_service",
    "ModelCallError": "reasoner.errors",
    "ModelMessage": "reasoner.messages",
    "ModelService": "reasoner.model_service",
    "MonoModelReasoner": "reasoner.mono",
    "ReActReasoner": "reasoner.react",
    "ReasonerError": "reasoner.errors",
    "ReasonerHooks": "reasoner.hooks",
    "ReasonerMemory": "reasoner.memory",
    "ReasonerOutcome": "reasoner.task",
    "RedisReasonerMemory": "reasoner.memory",
    "ScriptedModelService": "reasoner.testing",
    "Task": "reasoner.task",
    "ToolCallContext": "toolkit.context",
    "ToolRunner": "reasoner.tool_runner",
    "TransientModelError": "reasoner.errors",
    "Usage": "reasoner.messages",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reasoner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
