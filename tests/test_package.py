"""``tandem``'s public API: complete, resolvable, light to import, the only top-level name."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tandem

ROOT = Path(__file__).resolve().parent.parent

# The names issue 10 and DESIGN.md ask ``tandem/__init__.py`` to export.
REQUIRED = {
    "submit", "JobSpec", "JobResult", "JobHandle",
    "DualModelReasoner", "MonoModelReasoner", "ReActReasoner", "Task",
    "LiteLlmModelService", "ScriptedModelService",
    "Tool", "tool", "Action", "Toolkit", "ToolkitService", "load_toolkit",
    "get_reasoning_parser", "ToolCallContext",
    "ReasonerError", "ToolkitError", "JobError", "SettingsError", "WorkerError", "ClientError",
    "Client", "AsyncClient", "submit_async",
}  # fmt: skip


def test_all_holds_the_required_names_sorted_and_unique() -> None:
    assert set(tandem.__all__) >= REQUIRED
    assert tandem.__all__ == sorted(set(tandem.__all__))


@pytest.mark.parametrize("name", tandem.__all__)
def test_every_export_resolves_to_the_object_of_that_name(name: str) -> None:
    value = getattr(tandem, name)
    assert getattr(value, "__name__", name) == name
    assert value.__module__.startswith("tandem.")


def test_exports_are_the_subpackages_objects() -> None:
    from tandem.client.submission import submit
    from tandem.reasoner.loop.reasoner import DualModelReasoner
    from tandem.toolkit.tool import Tool

    assert tandem.DualModelReasoner is DualModelReasoner
    assert tandem.submit is submit
    assert tandem.Tool is Tool


def test_unknown_names_fail_and_dir_lists_the_api() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        tandem.Nope  # noqa: B018
    assert set(tandem.__all__) | {"__version__"} <= set(dir(tandem))


def test_version_is_the_distributions() -> None:
    assert tandem.__version__ == importlib.metadata.version("tandem-llm")


def test_each_package_has_one_error_root() -> None:
    from tandem.broker_config.errors import SettingsError
    from tandem.client.http.errors import ClientError, ConnectionFailed, StalePauseError, WaitTimeout
    from tandem.reasoner.errors import ConfigurationError, ModelCallError, ReasonerError
    from tandem.tasks.errors import JobError, JobSpecError, JobTimeout, UnknownJobError
    from tandem.toolkit.errors import (
        McpCallError,
        McpToolError,
        ToolArgumentsError,
        ToolDefinitionError,
        ToolkitError,
        UnknownVertexError,
    )
    from tandem.workers.errors import RuntimeStartError, WorkerError

    for error in (ConfigurationError, ModelCallError):
        assert issubclass(error, ReasonerError)
    for error in (ToolDefinitionError, UnknownVertexError, ToolArgumentsError, McpCallError, McpToolError):
        assert issubclass(error, ToolkitError) and not issubclass(error, ReasonerError)
    assert issubclass(RuntimeStartError, WorkerError)
    for error in (JobSpecError, UnknownJobError, JobTimeout):
        assert issubclass(error, JobError)
    assert issubclass(JobTimeout, TimeoutError)
    for error in (ConnectionFailed, StalePauseError, WaitTimeout):
        assert issubclass(error, ClientError)
    roots = (ReasonerError, ToolkitError, JobError, SettingsError, WorkerError, ClientError)
    assert all(not issubclass(a, b) for a in roots for b in roots if a is not b)


PROBE = """
import json, sys
import tandem
heavy = ("celery", "kombu", "litellm", "redis", "openai", "httpx", "mcp", "networkx")
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(heavy))))
"""


def test_importing_tandem_imports_neither_celery_nor_litellm(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


def test_the_card_folders_are_not_installed_at_the_top_level(tmp_path: Path) -> None:
    code = (
        "import importlib.util, json;"
        "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in "
        "('tasks', 'toolkit', 'workers', 'reasoner', 'broker_config', 'client')}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    assert not any(json.loads(done.stdout).values())


def test_reasoner_and_toolkit_never_import_celery_and_toolkit_never_imports_reasoner() -> None:
    for package in ("reasoner", "toolkit"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert "import celery" not in text and "from celery" not in text, path
            if package == "toolkit":
                assert "tandem.reasoner" not in text, path
