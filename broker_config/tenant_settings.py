"""``TenantSettings``: ``TANDEM_TENANTS`` and ``TANDEM_MAX_RUNNING_JOBS``, the tenants' shares and quotas.

``TANDEM_TENANTS`` is JSON, or the path of a JSON or YAML file holding it: one object per tenant id,
and ``default`` for every tenant not named::

    {"default": {"max_running_jobs": 20, "weight": 1},
     "acme": {"max_running_jobs": 100, "weight": 3, "max_tokens": 5000000, "max_cost_usd": 250}}

Every field may be left out (or ``null``): no cap on running jobs, weight 1, no daily quota.
``TANDEM_MAX_RUNNING_JOBS`` caps the jobs running at once across the fleet (all tenants); the slots
it frees go to the tenants with waiting jobs in proportion to their weights
(``tandem.tasks.tenants``). Every bad value is a ``SettingsError`` naming the tenant, the field and
the value. Read by the worker's runtime and by ``tandem tenants``, not by ``Settings`` (its module
is at its size limit).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.broker_config.errors import SettingsError
from tandem.broker_config.tokens import DEFAULT_TENANT, TENANT_ID

FIELDS = ("max_running_jobs", "weight", "max_tokens", "max_cost_usd")
MAX_WEIGHT = 1000.0


@dataclass(frozen=True)
class TenantPolicy:
    """What one tenant may use: ``None`` is no limit."""

    max_running_jobs: int | None = None
    """Its jobs running at once, fleet-wide; more wait (holding no worker) until one ends."""
    weight: float = 1.0
    """Its share of free job slots against the other tenants with waiting jobs."""
    max_tokens: int | None = None
    """Model tokens its jobs may use per UTC day; over it, intake refuses its new jobs."""
    max_cost_usd: float | None = None
    """USD its jobs' model calls may cost per UTC day; over it, intake refuses its new jobs."""

    def public(self) -> dict[str, Any]:
        """The policy as JSON."""
        return {name: getattr(self, name) for name in FIELDS}


@dataclass(frozen=True)
class TenantSettings:
    """The tenants' policies, the ``default`` one, and the fleet's cap on running jobs."""

    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
    default: TenantPolicy = field(default_factory=TenantPolicy)
    max_running_jobs: int | None = None
    """``TANDEM_MAX_RUNNING_JOBS``: jobs running at once across the fleet, all tenants together."""

    def policy(self, tenant: str) -> TenantPolicy:
        """The policy of ``tenant`` (``default``'s when it is not named)."""
        return self.tenants.get(tenant, self.default)

    @property
    def admission(self) -> bool:
        """Whether job starts are admitted (some cap on running jobs is set): a job then waits for
        its turn when its tenant or the fleet is at its cap."""
        policies = (self.default, *self.tenants.values())
        return self.max_running_jobs is not None or any(p.max_running_jobs is not None for p in policies)

    @property
    def quotas(self) -> bool:
        """Whether some tenant has a daily quota (usage is counted per tenant and day)."""
        policies = (self.default, *self.tenants.values())
        return any(p.max_tokens is not None or p.max_cost_usd is not None for p in policies)

    @property
    def enabled(self) -> bool:
        """Whether any of it is on: without ``TANDEM_TENANTS`` or ``TANDEM_MAX_RUNNING_JOBS`` jobs
        start as they come (no key is written, nothing is counted)."""
        return self.admission or self.quotas

    def shares(self) -> dict[str, Any]:
        """Caps and weights as the fair-share script reads them (``0``: no cap)."""

        def pair(p: TenantPolicy) -> list[float]:
            return [p.max_running_jobs or 0, p.weight]

        return {"d": pair(self.default), "t": {name: pair(p) for name, p in self.tenants.items()}}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TenantSettings:
        """Read and check ``TANDEM_TENANTS`` and ``TANDEM_MAX_RUNNING_JOBS``."""
        env = os.environ if env is None else env
        fleet = _fleet_cap(env.get("TANDEM_MAX_RUNNING_JOBS", "").strip())
        raw = env.get("TANDEM_TENANTS", "").strip()
        if not raw:
            return cls(max_running_jobs=fleet)
        doc = _document(raw)
        if not isinstance(doc, dict):
            raise SettingsError(
                f"TANDEM_TENANTS must be an object of tenants, got {type(doc).__name__}: write "
                '{"default": {"max_running_jobs": 20, "weight": 1}, "acme": {"weight": 3}}'
            )
        tenants: dict[str, TenantPolicy] = {}
        for name, value in doc.items():
            if not isinstance(name, str) or not TENANT_ID.fullmatch(name):
                raise SettingsError(
                    f"TANDEM_TENANTS names tenant {name!r}: a tenant id is 1 to 64 letters, digits, "
                    "'_', '.' or '-'"
                )
            tenants[name] = _policy(name, value)
        default = tenants.pop(DEFAULT_TENANT, TenantPolicy())
        # The tenant ``default`` (jobs with no owner) is the default entry itself.
        return cls(tenants=tenants, default=default, max_running_jobs=fleet)


def _fleet_cap(raw: str) -> int | None:
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SettingsError(
            f"TANDEM_MAX_RUNNING_JOBS={raw!r} must be a whole number of jobs, at least 1 "
            "(or unset: no fleet cap)"
        )
    return value


def _document(raw: str) -> Any:
    if raw.startswith(("{", "[")):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SettingsError(
                f"TANDEM_TENANTS is not valid JSON ({exc}); or name a JSON or YAML file"
            ) from None
    path = Path(raw).expanduser()
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(
            f"TANDEM_TENANTS={raw!r} is neither JSON nor a readable file ({exc.strerror or exc})"
        ) from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # the workers' extra; a YAML file is read where it is installed

        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SettingsError(f"TANDEM_TENANTS file {raw!r} is not valid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"TANDEM_TENANTS file {raw!r} is not valid JSON: {exc}") from None


def _policy(tenant: str, value: Any) -> TenantPolicy:
    if value is None:
        return TenantPolicy()
    if not isinstance(value, dict):
        raise SettingsError(
            f"TANDEM_TENANTS: tenant {tenant!r} must be an object of {', '.join(FIELDS)}, got {value!r}"
        )
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise SettingsError(
            f"TANDEM_TENANTS: tenant {tenant!r} has unknown field {unknown[0]!r}: the fields are "
            f"{', '.join(FIELDS)}"
        )

    def bad(name: str, what: str) -> SettingsError:
        shown = value.get(name)
        return SettingsError(f"TANDEM_TENANTS: tenant {tenant!r} field {name!r} = {shown!r} must be {what}")

    def whole(name: str) -> int | None:
        v = value.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise bad(name, "a whole number, at least 1 (or null: no limit)")
        return v

    weight = value.get("weight", 1.0)
    if weight is None:
        weight = 1.0
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= MAX_WEIGHT:
        raise bad("weight", f"a number above 0 and at most {MAX_WEIGHT:g} (e.g. 1)")
    cost = value.get("max_cost_usd")
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost <= 0
    ):
        raise bad("max_cost_usd", "a number of USD above 0 (or null: no limit)")
    return TenantPolicy(
        max_running_jobs=whole("max_running_jobs"),
        weight=float(weight),
        max_tokens=whole("max_tokens"),
        max_cost_usd=None if cost is None else float(cost),
    )


__all__ = ["TenantPolicy", "TenantSettings"]
