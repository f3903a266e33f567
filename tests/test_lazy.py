"""Lazy exports (``tandem._lazy``): names load on first use, and on an install without the
``worker`` extra the names that need it say which extra and how to install it."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tandem import _lazy
from tandem.workers import extras

ROOT = Path(__file__).resolve().parent.parent


def _package(monkeypatch: pytest.MonkeyPatch, module_source: str, *, worker_only: frozenset[str]) -> Any:
    """A package ``fakepkg`` exporting ``thing`` from ``fakepkg_mod`` (built from ``module_source``)."""
    mod = types.ModuleType("fakepkg_mod")
    monkeypatch.setitem(sys.modules, "fakepkg_mod", mod)
    exec(compile(module_source, "fakepkg_mod", "exec"), mod.__dict__)
    namespace: dict[str, Any] = {"__name__": "fakepkg"}
    getattr_, _ = _lazy.lazy_exports(namespace, {"thing": "fakepkg_mod"}, worker_only=worker_only)
    return getattr_, namespace


def test_a_worker_only_name_on_a_core_install_names_the_extra_before_importing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(extras, "missing", lambda extra: ["litellm", "networkx"] if extra == "worker" else [])
    getattr_, namespace = _package(monkeypatch, "thing = 1", worker_only=frozenset({"thing"}))
    with pytest.raises(ModuleNotFoundError) as caught:
        getattr_("thing")
    assert str(caught.value) == (
        "fakepkg.thing needs the worker extra, which this install lacks (no module named 'litellm'): "
        "pip install 'tandem-llm[worker]' (the core install is the client side only)"
    )
    assert caught.value.name == "litellm"
    assert "thing" not in namespace


def test_a_name_whose_module_lacks_a_worker_distribution_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(extras, "missing", lambda extra: ["networkx"])
    monkeypatch.delitem(sys.modules, "fakepkg_mod", raising=False)
    namespace: dict[str, Any] = {"__name__": "fakepkg"}
    getattr_, _ = _lazy.lazy_exports(namespace, {"thing": "a_module_no_install_has_zz9"})
    with pytest.raises(
        ModuleNotFoundError, match=r"fakepkg\.thing needs the worker extra, .*'a_module_no_install_has_zz9'"
    ):
        getattr_("thing")


def test_with_the_extra_installed_the_names_load_and_errors_stay_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(extras, "missing", lambda extra: [])
    getattr_, namespace = _package(monkeypatch, "thing = 41 + 1", worker_only=frozenset({"thing"}))
    assert getattr_("thing") == 42 and namespace["thing"] == 42
    broken: dict[str, Any] = {"__name__": "fakepkg"}
    getattr_, _ = _lazy.lazy_exports(broken, {"thing": "a_module_no_install_has_zz9"})
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'a_module_no_install_has_zz9'$"):
        getattr_("thing")


def test_the_public_names_that_need_the_worker_extra_are_the_in_process_ones() -> None:
    import tandem

    assert {
        "DualModelReasoner",
        "MonoModelReasoner",
        "ReActReasoner",
        "LiteLlmModelService",
        "Toolkit",
        "ToolkitService",
        "load_toolkit",
    } == tandem._WORKER_ONLY
    assert set(tandem.__all__) >= tandem._WORKER_ONLY
    assert not {"Client", "AsyncClient", "submit", "JobHandle", "JobSpec"} & tandem._WORKER_ONLY


def test_the_build_backend_empties_build_before_each_wheel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A module left in ./build/lib by an earlier build (removed from the tree since) never ships."""
    monkeypatch.syspath_prepend(str(ROOT / "build_backend"))
    import tandem_build

    stale = tmp_path / "build" / "lib" / "tandem" / "reasoner" / "removed_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("GONE = True\n")
    seen: list[bool] = []

    def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: Any = None) -> str:
        seen.append(stale.exists())
        return "tandem_llm-0-py3-none-any.whl"

    monkeypatch.setattr(tandem_build.build_meta, "build_wheel", build_wheel)
    monkeypatch.chdir(tmp_path)
    assert tandem_build.build_wheel(str(tmp_path / "dist")) == "tandem_llm-0-py3-none-any.whl"
    assert seen == [False]
