"""Lazy exports for a package ``__init__``: a name's module is imported when the name is first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str], *, extra: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose ``exports`` map a name to its module.

    A resolved name is stored in ``namespace`` (the package's ``globals()``), so it is looked up
    once; an unknown name raises ``AttributeError`` as for any module.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return [*sorted(exports), *extra]

    return __getattr__, __dir__
