"""The public surface of ``reasoner`` and ``toolkit``: complete, resolvable, free of Celery."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tandem import reasoner, toolkit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", reasoner.__all__)
def test_every_reasoner_export_resolves(name: str) -> None:
    value = getattr(reasoner, name)
    assert value is not None
    assert getattr(value, "__name__", name) == name  # the name is the object's own, not an alias


@pytest.mark.parametrize("name", toolkit.__all__)
def test_every_toolkit_export_resolves(name: str) -> None:
    assert getattr(toolkit, name) is not None


def test_exports_are_sorted_and_unique() -> None:
    for module in (reasoner, toolkit):
        assert list(module.__all__) == sorted(set(module.__all__)), module.__name__


def test_the_design_names_are_exported() -> None:
    """The names DESIGN.md's in-process example imports."""
    assert {
        "DualModelReasoner",
        "MonoModelReasoner",
        "ReActReasoner",
        "LiteLlmModelService",
        "Task",
    } <= set(reasoner.__all__)
    assert {"Tool", "Action", "ToolGroup", "Toolkit", "ToolkitService", "load_toolkit"} <= set(
        toolkit.__all__
    )


def test_dir_lists_the_exports_and_unknown_names_fail() -> None:
    assert set(reasoner.__all__) <= set(dir(reasoner))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        reasoner.Nope  # noqa: B018


def test_a_lazy_export_is_the_defining_modules_object() -> None:
    from tandem.reasoner.loop.reasoner import DualModelReasoner
    from tandem.reasoner.memory import RedisReasonerMemory
    from tandem.toolkit.context import ToolCallContext

    assert reasoner.DualModelReasoner is DualModelReasoner
    assert reasoner.RedisReasonerMemory is RedisReasonerMemory
    assert reasoner.ToolCallContext is toolkit.ToolCallContext is ToolCallContext


PROBE = """
import json, sys
from tandem import reasoner, toolkit
after_import = sorted(m for m in sys.modules if m == "celery" or m.startswith(("celery.", "kombu")))
lazy_loaded = "tandem.reasoner.loop.reasoner" in sys.modules or "litellm" in sys.modules
for name in reasoner.__all__:
    getattr(reasoner, name)
for name in toolkit.__all__:
    getattr(toolkit, name)
after_use = sorted(m for m in sys.modules if m == "celery" or m.startswith(("celery.", "kombu")))
print(json.dumps({"after_import": after_import, "lazy_loaded": lazy_loaded, "after_use": after_use}))
"""


def test_reasoner_and_toolkit_never_import_celery() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["after_import"] == []
    assert found["after_use"] == []  # not even with every export resolved (LiteLLM included)
    assert found["lazy_loaded"] is False  # importing ``reasoner`` loads no reasoner or LiteLLM
