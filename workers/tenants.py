"""``tandem tenants``: each tenant's weight, cap, running and waiting jobs, and today's usage
against its daily quota (``TANDEM_TENANTS``; docs/tenants.md), as Redis holds them now."""

from __future__ import annotations

import json
from typing import Any

from tandem.tasks.tenants.report import tenant_rows

__all__ = ["format_tenants", "tenant_rows", "tenants_command"]


def format_tenants(
    rows: list[dict[str, Any]], fleet: int | None, default: dict[str, Any] | None = None
) -> str:
    """A table of ``tenant_rows``; ``default`` is the policy of the tenants not named."""
    if not rows:
        return "no tenant configured or with jobs: set TANDEM_TENANTS (see docs/tenants.md)"

    def of(used: float, limit: float | None, fmt: str) -> str:
        return fmt.format(used) + ("" if limit is None else " / " + fmt.format(limit))

    table = [("tenant", "weight", "cap", "running", "waiting", "tokens today", "cost today (USD)")]
    for r in rows:
        cap = "-" if r["max_running_jobs"] is None else str(r["max_running_jobs"])
        table.append(
            (
                r["tenant"],
                f"{r['weight']:g}",
                cap,
                str(r["running"]),
                str(r["waiting"]),
                of(r["tokens_today"], r["max_tokens"], "{:.0f}"),
                of(r["cost_usd_today"], r["max_cost_usd"], "{:.4f}"),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    if default is not None:
        named = ", ".join(f"{k} {v:g}" for k, v in default.items() if v is not None)
        lines.append(f"tenants not named (default): {named or 'no limits'}")
    lines.append(f"fleet cap (TANDEM_MAX_RUNNING_JOBS): {fleet or 'none'}; quotas reset at midnight UTC")
    return "\n".join(lines)


def tenants_command(as_json: bool) -> int:
    """Print the tenants' table (or JSON); exit code 0."""
    from tandem.broker_config.tenant_settings import TenantSettings
    from tandem.tasks.runtime import get_runtime

    rt, tenants = get_runtime(), TenantSettings.from_env()
    rows = tenant_rows(rt.redis, rt.settings.prefix, tenants)
    if as_json:
        fleet, default = tenants.max_running_jobs, tenants.default.public()
        print(json.dumps({"max_running_jobs": fleet, "default": default, "tenants": rows}, indent=2))
    else:
        print(format_tenants(rows, tenants.max_running_jobs, tenants.default.public()))
    return 0
