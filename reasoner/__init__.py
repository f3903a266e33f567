"""The reasoning core: model services, parsers, prompts, memory and the mono/dual/ReAct reasoners.

Nothing here imports Celery; everything runs in-process on its own. Names are loaded on first
use, so importing one piece does not import the rest (LiteLLM in particular is slow to import).
"""

from __future__ import annotations

if __name__ != "tandem.reasoner":  # this folder imported under its bare name, from the repository root
    raise ImportError(
        f"{__name__!r} is tandem's folder reasoner/, installed as the package 'tandem.reasoner': "
        "import tandem.reasoner instead (a bare import would load a second copy, whose classes and "
        "errors are not tandem's)"
    )

from tandem._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ApprovalError": "tandem.reasoner.errors",
    "ConfigurationError": "tandem.reasoner.errors",
    "Decision": "tandem.reasoner.decisions",
    "DualModelReasoner": "tandem.reasoner.loop.reasoner",
    "FunctionCallResult": "tandem.reasoner.messages",
    "FunctionCallStatus": "tandem.reasoner.messages",
    "InMemoryReasonerMemory": "tandem.reasoner.memory",
    "LiteLlmModelService": "tandem.reasoner.models.litellm_service",
    "ModelCallError": "tandem.reasoner.errors",
    "ModelMessage": "tandem.reasoner.messages",
    "ModelService": "tandem.reasoner.models.model_service",
    "MonoModelReasoner": "tandem.reasoner.loop.reasoner",
    "PendingCall": "tandem.reasoner.decisions",
    "ReActReasoner": "tandem.reasoner.loop.reasoner",
    "Reasoner": "tandem.reasoner.loop.reasoner",
    "ReasonerError": "tandem.reasoner.errors",
    "ReasonerHooks": "tandem.reasoner.hooks",
    "ReasonerMemory": "tandem.reasoner.memory",
    "ReasonerOutcome": "tandem.reasoner.task",
    "RedisReasonerMemory": "tandem.reasoner.memory",
    "ScriptedModelService": "tandem.reasoner.testing",
    "Task": "tandem.reasoner.task",
    "ToolCallContext": "tandem.toolkit.context",
    "ToolRunner": "tandem.reasoner.tool_runner",
    "TransientModelError": "tandem.reasoner.errors",
    "Usage": "tandem.reasoner.messages",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
