"""Lazy exports for a package ``__init__``: a name's module is imported when the name is first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any],
    exports: Mapping[str, str],
    *,
    extra: tuple[str, ...] = (),
    worker_only: frozenset[str] = frozenset(),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose ``exports`` map a name to its module.

    A resolved name is stored in ``namespace`` (the package's ``globals()``), so it is looked up
    once; an unknown name raises ``AttributeError`` as for any module. A name whose module needs a
    distribution of the ``worker`` extra, on an install without it (the core install is the client
    side), raises ``ModuleNotFoundError`` naming the extra and its install line; so do the names of
    ``worker_only`` (the in-process reasoners, the toolkit graph), at once rather than in the
    middle of a run, even when their own module happens to import.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if name in worker_only:
            _require_worker(f"{package}.{name}")
        try:
            value = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            advice = _extra_advice(f"{package}.{name}", exc)
            if advice is None:
                raise
            raise ModuleNotFoundError(advice, name=exc.name) from exc
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return [*sorted(exports), *extra]

    return __getattr__, __dir__


def _require_worker(what: str) -> None:
    """Raise ``ModuleNotFoundError`` naming the extra when this install lacks the ``worker`` extra."""
    from tandem.workers.extras import missing

    absent = missing("worker")
    if absent:
        raise ModuleNotFoundError(_advice(what, absent[0]), name=absent[0])


def _advice(what: str, module: str) -> str:
    from tandem.workers.extras import DISTRIBUTION

    return (
        f"{what} needs the worker extra, which this install lacks (no module named {module!r}): "
        f"pip install '{DISTRIBUTION}[worker]' (the core install is the client side only)"
    )


def _extra_advice(what: str, exc: ModuleNotFoundError) -> str | None:
    """What to install for ``what`` when ``exc`` is a distribution of the ``worker`` extra missing
    from this install; ``None`` when it is something else (a bug, tandem's own module)."""
    top = (exc.name or "").split(".")[0]
    if not top or top == "tandem":
        return None
    from tandem.workers.extras import missing

    if not missing("worker"):
        return None
    return _advice(what, exc.name or top)
