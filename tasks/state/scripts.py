"""The Lua scripts of the job state, read from ``scripts/*.lua`` (package data) once per process.

A script whose header holds the line ``--! with prelude.lua`` runs after ``prelude.lua``, the
helpers every job script shares (``now``, ``fmt``, the TTLs of a job's keys).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from itertools import takewhile

WITH_PRELUDE = "--! with prelude.lua"


@cache
def lua(name: str) -> str:
    """The source of script ``name`` (``scripts/<name>.lua``), with the prelude when it asks for it."""
    source = files(__package__ or "tandem.tasks.state").joinpath("scripts", f"{name}.lua").read_text()
    header = takewhile(lambda line: line.startswith("--"), source.splitlines())
    return lua("prelude") + source if WITH_PRELUDE in header else source
