"""``ChildSettings``: the ``TANDEM_SPAWN_*`` and ``TANDEM_CHILD_*`` variables of child jobs
(``ToolCallContext.spawn`` and the built-in ``spawn_jobs`` tool, docs/children.md).

Read by ``Settings.from_env`` (``Settings.children``); every bad value is a ``SettingsError`` naming
the variable, the value and what to write.

- ``TANDEM_SPAWN_TENANTS``: the tenants whose jobs' *models* may call ``spawn_jobs``, comma-separated
  (``*``: every tenant; empty, the default: none). A tool's ``ctx.spawn`` needs no such grant: the
  operator chose to load that tool.
- ``TANDEM_CHILD_MAX_DEPTH`` (default 3): how deep children nest (a job submitted by a client is
  depth 0, its children depth 1, ...).
- ``TANDEM_CHILD_MAX_FANOUT`` (default 100): the most children one job may start in all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tandem.broker_config.errors import SettingsError

DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_FANOUT = 100
MAX_DEPTH_LIMIT = 20
"""The deepest ``TANDEM_CHILD_MAX_DEPTH`` may be."""


def _count(env: Mapping[str, str], name: str, default: int, maximum: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or not 0 <= int(raw) <= maximum:
        raise SettingsError(f"{name}={raw!r} must be a whole number from 0 to {maximum} (e.g. {default})")
    return int(raw)


@dataclass(frozen=True)
class ChildSettings:
    """Who may spawn child jobs from the model, and how many and how deep any job may."""

    spawn_tenants: frozenset[str] = frozenset()
    max_depth: int = DEFAULT_MAX_DEPTH
    max_fanout: int = DEFAULT_MAX_FANOUT

    def may_spawn(self, tenant: str) -> bool:
        """Whether the models of ``tenant``'s jobs are offered ``spawn_jobs``."""
        return "*" in self.spawn_tenants or tenant in self.spawn_tenants

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ChildSettings:
        """The settings from ``env``; ``SettingsError`` naming a bad variable."""
        tenants = frozenset(t.strip() for t in env.get("TANDEM_SPAWN_TENANTS", "").split(",") if t.strip())
        return cls(
            spawn_tenants=tenants,
            max_depth=_count(env, "TANDEM_CHILD_MAX_DEPTH", DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT),
            max_fanout=_count(env, "TANDEM_CHILD_MAX_FANOUT", DEFAULT_MAX_FANOUT, 10_000),
        )
