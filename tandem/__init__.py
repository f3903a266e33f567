"""tandem: LLM reasoning jobs (Thinker/Actor, mono, ReAct) in-process or distributed on Celery.

The public API is the names below; everything else lives in the subpackages
(``tandem.reasoner``, ``tandem.toolkit``, ``tandem.tasks``, ``tandem.client``,
``tandem.workers``, ``tandem.broker_config``). Names load on first use, so ``import tandem`` imports neither
LiteLLM nor Celery::

    import tandem

    outcome = tandem.DualModelReasoner(thinker=model, actor=model).run(tandem.Task(goal="..."))
    job = tandem.submit({"goal": "..."})          # Celery and Redis are imported here, not before
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem._lazy import lazy_exports

__version__ = "0.2.0"

_EXPORTS: dict[str, str] = {
    # running jobs on Celery
    "JobHandle": "tandem.client.handle",
    "JobResult": "tandem.tasks.spec",
    "JobSpec": "tandem.tasks.spec",
    "submit": "tandem.client.submission",
    "submit_async": "tandem.client.submission",
    # a client of `tandem api` that needs only httpx and pydantic
    "AsyncClient": "tandem.client.http",
    "Client": "tandem.client.http",
    # in-process reasoners and their inputs
    "DualModelReasoner": "tandem.reasoner.loop.reasoner",
    "MonoModelReasoner": "tandem.reasoner.loop.reasoner",
    "ReActReasoner": "tandem.reasoner.loop.reasoner",
    "Task": "tandem.reasoner.task",
    # model services and parsers
    "LiteLlmModelService": "tandem.reasoner.models.litellm_service",
    "ScriptedModelService": "tandem.reasoner.testing",
    "get_reasoning_parser": "tandem.reasoner.parsing.registry",
    # tools and the toolkit
    "Action": "tandem.toolkit.action",
    "Tool": "tandem.toolkit.tool",
    "ToolCallContext": "tandem.toolkit.context",
    "Toolkit": "tandem.toolkit.graph",
    "ToolkitService": "tandem.toolkit.service",
    "load_toolkit": "tandem.toolkit.loader",
    "tool": "tandem.toolkit.tool",
    # error roots, one per package
    "ClientError": "tandem.client.http",
    "ConfigurationError": "tandem.reasoner.errors",
    "JobError": "tandem.tasks.errors",
    "ReasonerError": "tandem.reasoner.errors",
    "SettingsError": "tandem.broker_config.errors",
    "ToolkitError": "tandem.toolkit.errors",
    "WorkerError": "tandem.workers.errors",
}

__all__ = [
    "Action",
    "AsyncClient",
    "Client",
    "ClientError",
    "ConfigurationError",
    "DualModelReasoner",
    "JobError",
    "JobHandle",
    "JobResult",
    "JobSpec",
    "LiteLlmModelService",
    "MonoModelReasoner",
    "ReActReasoner",
    "ReasonerError",
    "ScriptedModelService",
    "SettingsError",
    "Task",
    "Tool",
    "ToolCallContext",
    "Toolkit",
    "ToolkitError",
    "ToolkitService",
    "WorkerError",
    "get_reasoning_parser",
    "load_toolkit",
    "submit",
    "submit_async",
    "tool",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors only
    from tandem.broker_config.errors import SettingsError
    from tandem.client.handle import JobHandle
    from tandem.client.http import AsyncClient, Client, ClientError
    from tandem.client.submission import submit, submit_async
    from tandem.reasoner.errors import ConfigurationError, ReasonerError
    from tandem.reasoner.loop.reasoner import DualModelReasoner, MonoModelReasoner, ReActReasoner
    from tandem.reasoner.models.litellm_service import LiteLlmModelService
    from tandem.reasoner.parsing.registry import get_reasoning_parser
    from tandem.reasoner.task import Task
    from tandem.reasoner.testing import ScriptedModelService
    from tandem.tasks.errors import JobError
    from tandem.tasks.spec import JobResult, JobSpec
    from tandem.toolkit.action import Action
    from tandem.toolkit.context import ToolCallContext
    from tandem.toolkit.errors import ToolkitError
    from tandem.toolkit.graph import Toolkit
    from tandem.toolkit.loader import load_toolkit
    from tandem.toolkit.service import ToolkitService
    from tandem.toolkit.tool import Tool, tool
    from tandem.workers.errors import WorkerError


_WORKER_ONLY = frozenset(
    {
        "DualModelReasoner",
        "MonoModelReasoner",
        "ReActReasoner",
        "LiteLlmModelService",
        "Toolkit",
        "ToolkitService",
        "load_toolkit",
    }
)
"""Names that need the ``worker`` extra (the in-process reasoners, model services and toolkit graph):
on the core install they say so when used, not from deep inside a run."""

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, extra=("__version__",), worker_only=_WORKER_ONLY)
