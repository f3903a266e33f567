"""``ToolPolicy``: which tools a job may use, decided by the worker's configuration, not by the job.

The toolkit YAML's ``policy:`` section, or ``TANDEM_TOOL_POLICY`` (the same mapping as JSON or YAML
text, or the path of a file holding it; it replaces the toolkit's)::

    policy:
      allow: ["*"]            # the tools a job gets when its spec names none (default: every tool)
      grant: [shell, "web.*"] # tools a job gets only by naming them in its spec's ``tools``
      deny: [drop_table]      # tools no job ever gets

Entries are tool names or ``fnmatch`` patterns (``web.*``). A job's ``tools`` can only narrow what
the policy permits: a name outside ``allow`` and ``grant`` (or in ``deny``, or not in the toolkit)
is refused at submit, naming it and the tools the job may ask for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from tandem.toolkit.errors import ToolkitError

_KEYS = ("allow", "grant", "deny")


class ToolPolicyError(ToolkitError):
    """A job asked for a tool the worker's policy does not permit, or a policy is malformed."""


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True)
class ToolPolicy:
    """The worker's tool policy (see the module docstring); the default permits every tool."""

    allow: tuple[str, ...] = ("*",)
    grant: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

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
        lists: dict[str, tuple[str, ...]] = {}
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

    def permits(self, name: str) -> bool:
        """True when some job may use ``name`` (allowed or granted, not denied)."""
        return not _matches(name, self.deny) and _matches(name, (*self.allow, *self.grant))

    def default_tools(self, known: Iterable[str]) -> list[str]:
        """The tools of ``known`` a job gets when its spec names none."""
        return [n for n in known if _matches(n, self.allow) and not _matches(n, (*self.grant, *self.deny))]

    def permitted(self, known: Iterable[str]) -> list[str]:
        """The tools of ``known`` a job may ask for by name."""
        return [n for n in known if self.permits(n)]

    def for_job(self, known: Sequence[str], requested: Sequence[str] | None) -> list[str]:
        """The tools a job may use: the default ones, or exactly ``requested`` when every name in it is
        known and permitted; ``ToolPolicyError`` naming the refused names and the valid ones."""
        if requested is None:
            return self.default_tools(known)
        known_set = set(known)
        unknown = [n for n in requested if n not in known_set]
        refused = [n for n in requested if n in known_set and not self.permits(n)]
        if unknown or refused:
            valid = ", ".join(self.permitted(known)) or "(none)"
            parts = []
            if unknown:
                parts.append(f"unknown tools {unknown}")
            if refused:
                parts.append(f"tools {refused} are not permitted by the worker's tool policy")
            raise ToolPolicyError(f"field 'tools': {' and '.join(parts)}; the tools a job may name: {valid}")
        return list(dict.fromkeys(requested))
