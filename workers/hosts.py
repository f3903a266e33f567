"""``tandem hosts``: the fleet-wide capacity of every model host, as Redis holds it now."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tandem.tasks.hosts.capacity import HostSnapshot, host_snapshots
from tandem.toolkit.redaction import masked_url

__all__ = ["format_hosts", "host_snapshots", "hosts_json"]


def _budget(available: float | None, burst: float | None, per_minute: int | None) -> str:
    """The limit and what its bucket holds now of its burst (below 0: a debt later calls wait for)."""
    if per_minute is None or available is None or burst is None:
        return "-"
    return f"{per_minute}/min, {min(available, burst):.0f}/{burst:.0f} free"


def _backoff(snap: HostSnapshot) -> str:
    if snap.backoff_until is None:
        return "none"
    left = snap.backoff_until - snap.now
    if left > 0:
        return f"{left:.1f}s left"
    return "probe under way" if snap.probe else "ended, awaiting a probe"


def format_hosts(snapshots: Sequence[HostSnapshot]) -> str:
    """A table: in-flight calls of the cap, steps waiting, each budget's limit and what its bucket
    holds now (``tandem.tasks.hosts.capacity``), back-off."""
    if not snapshots:
        return (
            "no model host has capacity limits: set TANDEM_<ROLE>_MAX_IN_FLIGHT, _RPM or _TPM "
            "on the workers (see docs/capacity.md)"
        )
    rows = [("host", "in flight", "waiting", "requests/min", "tokens/min", "back-off", "429s")]
    for s in snapshots:
        cap = s.limits.get("max_in_flight")
        rows.append(
            (
                masked_url(s.host),
                f"{s.in_flight}/{cap}" if cap else str(s.in_flight),
                str(s.waiting),
                _budget(s.requests_available, s.requests_burst, s.limits.get("rpm")),
                _budget(s.tokens_available, s.tokens_burst, s.limits.get("tpm")),
                _backoff(s),
                str(int(s.stats.get("rate_limited", 0))),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def hosts_json(snapshots: Sequence[HostSnapshot]) -> str:
    """The snapshots as JSON (``tandem hosts --json``)."""
    return json.dumps(
        [
            {
                "host": masked_url(s.host),
                "limits": s.limits,
                "in_flight": s.in_flight,
                "waiting": s.waiting,
                "requests_available": s.requests_available,
                "tokens_available": s.tokens_available,
                "requests_burst": s.requests_burst,
                "tokens_burst": s.tokens_burst,
                "backoff_seconds_left": max(0.0, s.backoff_until - s.now) if s.backoff_until else 0.0,
                "probe_under_way": s.probe,
                "totals": s.stats,
            }
            for s in snapshots
        ],
        indent=2,
    )
