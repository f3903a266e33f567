"""tandem's build backend: setuptools', on a build directory emptied first.

setuptools copies the packages into ``./build/lib`` and packs the wheel from there, keeping what
an earlier build left: a module removed since (a ``git pull`` that moved it) would ship again in a
wheel rebuilt in the same clone. Each wheel built here starts from an empty ``./build``, so it holds
what the tree holds. Everything else is setuptools' backend as it is (``pyproject.toml`` names this
module with ``backend-path``; it is not installed).
"""

from __future__ import annotations

import shutil
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import (  # noqa: F401 - the rest of the PEP 517/660 interface, unchanged
    build_editable,
    build_sdist,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' ``build_wheel``, after emptying ``./build`` (the module docstring says why)."""
    shutil.rmtree("build", ignore_errors=True)
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
