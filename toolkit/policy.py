"""``ToolPolicy``: which tools a job may use, decided by the worker's configuration, not by the job.

The toolkit YAML's ``policy:`` section, or ``TANDEM_TOOL_POLICY`` (the same mapping as JSON or YAML
text, or the path of a file holding it; it replaces the toolkit's)::

    policy:
      allow: ["*"]            # the tools a job gets when its spec names none (default: every tool)
      grant:                  # grant-only tools, by tenant (JobSpec.owner): a job of team-a gets
        team-a: [shell]       # shell only by naming it in its spec's ``tools``; no other job gets it
        "*": ["web.*"]        # "*": every tenant
      deny: [drop_table]      # tools no job ever gets

Entries are tool names or ``fnmatch`` patterns (``web.*``). A tool matching any ``grant`` entry is
grant-only: never a default tool, and usable only by a job that names it and whose tenant the
policy grants it to. The job cannot grant itself anything. ``grant`` as a plain list (the form
before tenants, ``grant: [shell]``) grants to the ``default`` tenant only: a deployment without
tenants keeps its behaviour, and a tenant's job never gets a tool the operator did not grant it.

A job's ``tools`` can only narrow what the policy permits: a name outside ``allow`` and its
tenant's grants (or in ``deny``, or not in the toolkit) is refused at submit, naming it and the
tools the job may ask for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from tandem.toolkit.errors import ToolkitError

_KEYS = ("allow", "grant", "deny")
DEFAULT_TENANT = "default"
"""The tenant of a job that names none (``tandem.broker_config.tokens.DEFAULT_TENANT``)."""
EVERY_TENANT = "*"


_TENANT = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


class ToolPolicyError(ToolkitError):
    """A job asked for a tool the worker's policy does not permit, or a policy is malformed."""


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class ToolPolicy:
    """The worker's tool policy (see the module docstring); the default permits every tool."""

    allow: tuple[str, ...] = ("*",)
    grant: tuple[str, ...] = ()
    """Grant-only tools of the ``default`` tenant (the plain-list form of ``grant``)."""
    deny: tuple[str, ...] = ()
    tenant_grants: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Grant-only tools by tenant (``*``: every tenant), from the mapping form of ``grant``."""

    @classmethod
    def from_mapping(cls, data: object, where: str = "policy") -> ToolPolicy:
        """A policy from ``{allow, grant, deny}`` lists; ``ToolPolicyError`` naming ``where`` if malformed."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ToolPolicyError(f"{where}: expected a mapping with allow/grant/deny, got {data!r}"[:300])
        unknown = sorted(set(map(str, data)) - set(_KEYS))
        if unknown:
            raise ToolPolicyError(f"{where}: unknown keys {unknown}; the keys are allow, grant and deny")
        lists: dict[str, Any] = {}
        grant = data.get("grant")
        if isinstance(grant, Mapping):
            lists["tenant_grants"] = tuple(
                (_tenant(tenant, where), _patterns(where, f"grant.{tenant}", value))
                for tenant, value in grant.items()
            )
            data = {k: v for k, v in data.items() if k != "grant"}
        for key in _KEYS:
            value = data.get(key, ["*"] if key == "allow" else [])
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ToolPolicyError(
                    f"{where}: {key!r} must be a list of tool names or patterns, got {value!r}"
                )
            lists[key] = tuple(value)
        return cls(**lists)

    @classmethod
    def from_text(cls, text: str, where: str = "TANDEM_TOOL_POLICY") -> ToolPolicy:
        """A policy from JSON or YAML text, or from the file that ``text`` names."""
        source = text
        path = Path(text)
        if "\n" not in text and not text.lstrip().startswith(("{", "[")) and path.is_file():
            source = path.read_text(encoding="utf-8")
            where = f"{where} ({text})"
        try:
            data: Any = json.loads(source)
        except ValueError:
            try:
                data = yaml.safe_load(source)
            except yaml.YAMLError as exc:
                raise ToolPolicyError(f"{where}: neither JSON nor YAML: {exc}") from None
        if isinstance(data, Mapping) and set(data) == {"policy"}:
            data = data["policy"]
        return cls.from_mapping(data, where)

    @property
    def grant_only(self) -> tuple[str, ...]:
        """Every ``grant`` pattern, of every tenant: the tools that are never a default tool."""
        return (*self.grant, *(p for _, patterns in self.tenant_grants for p in patterns))

    def granted(self, owner: str = DEFAULT_TENANT) -> tuple[str, ...]:
        """The ``grant`` patterns of tenant ``owner`` (those of ``*`` included)."""
        own = [
            p for tenant, patterns in self.tenant_grants if tenant in (owner, EVERY_TENANT) for p in patterns
        ]
        return (*(self.grant if owner == DEFAULT_TENANT else ()), *own)

    def permits(self, name: str, owner: str = DEFAULT_TENANT) -> bool:
        """True when a job of tenant ``owner`` may use ``name``: not denied, and granted to the
        tenant if it is grant-only, else allowed."""
        if _matches(name, self.deny):
            return False
        if _matches(name, self.grant_only):
            return _matches(name, self.granted(owner))
        return _matches(name, self.allow)

    def default_tools(self, known: Iterable[str]) -> list[str]:
        """The tools of ``known`` a job gets when its spec names none."""
        return [
            n for n in known if _matches(n, self.allow) and not _matches(n, (*self.grant_only, *self.deny))
        ]

    def permitted(self, known: Iterable[str], owner: str = DEFAULT_TENANT) -> list[str]:
        """The tools of ``known`` a job of tenant ``owner`` may ask for by name."""
        return [n for n in known if self.permits(n, owner)]

    def for_job(
        self, known: Sequence[str], requested: Sequence[str] | None, owner: str = DEFAULT_TENANT
    ) -> list[str]:
        """The tools a job of tenant ``owner`` may use: the default ones, or exactly ``requested``
        when every name in it is known and permitted to the tenant; ``ToolPolicyError`` naming the
        refused names and the valid ones."""
        if requested is None:
            return self.default_tools(known)
        known_set = set(known)
        unknown = [n for n in requested if n not in known_set]
        refused = [n for n in requested if n in known_set and not self.permits(n, owner)]
        if unknown or refused:
            valid = ", ".join(self.permitted(known, owner)) or "(none)"
            parts = []
            if unknown:
                parts.append(f"unknown tools {unknown}")
            if refused:
                parts.append(
                    f"tools {refused} are not permitted by the worker's tool policy to tenant {owner!r} "
                    "(a grant-only tool is granted by the operator's policy, per tenant)"
                )
            raise ToolPolicyError(f"field 'tools': {' and '.join(parts)}; the tools a job may name: {valid}")
        return list(dict.fromkeys(requested))


def _tenant(value: object, where: str) -> str:
    if not isinstance(value, str) or not (value == EVERY_TENANT or _TENANT.fullmatch(value)):
        raise ToolPolicyError(
            f"{where}: 'grant' names tenant {value!r}: a tenant id is 1 to 64 letters, digits, '_', '.' "
            "or '-', or '*' for every tenant"
        )
    return value


def _patterns(where: str, key: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ToolPolicyError(f"{where}: {key!r} must be a list of tool names or patterns, got {value!r}")
    return tuple(value)
