"""docker-compose.yml as ``docker compose`` reads it, for the breaking tests of the image and compose.

YAML anchors and merge keys are PyYAML's; ``${VAR}`` interpolation follows the Compose
specification: ``${VAR:-default}`` (unset or empty), ``${VAR-default}`` (unset),
``${VAR:?message}`` (an error when unset or empty), ``${VAR?message}`` (when unset), ``$$`` for a
dollar sign. An unset plain ``${VAR}`` is the empty string, as compose makes it (with a warning).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
_VAR = re.compile(
    r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])((?:[^{}]|\{[^}]*\})*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


class ComposeError(Exception):
    """What ``docker compose`` refuses the file with."""


def interpolate(value: str, env: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        current = env.get(name)
        missing = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":-", "-"):
            return interpolate(arg, env) if missing else str(current)
        if op in (":?", "?"):
            if missing:
                raise ComposeError(f"required variable {name} is missing a value: {arg}")
            return str(current)
        return "" if current is None else str(current)

    return _VAR.sub(one, value)


def _walk(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_walk(x, env) for x in node]
    if isinstance(node, dict):
        return {k: _walk(v, env) for k, v in node.items()}
    return node


def compose_services(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The services of docker-compose.yml with ``env`` (the shell and ``.env``) interpolated."""
    return dict(_walk(yaml.safe_load(COMPOSE.read_text()), env)["services"])


def service_env(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's ``environment`` as the container gets it (a mapping or ``KEY=value`` list;
    ``None`` values are unset)."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    return {k: "" if v is None else str(v) for k, v in raw.items() if v is not None}
