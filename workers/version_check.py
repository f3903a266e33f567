"""``tandem version-check``: the format versions of the jobs in flight, and whether this release
reads them all (``tandem.tasks.state.versions``).

Run it with the release about to be rolled out (or rolled back to): exit 0 when its workers read
every live job, else 1 with a line saying what to do. The counts are exact (every entry of the
live-job index).
"""

from __future__ import annotations

import json
from typing import Any

from tandem.tasks.state.versions import SUPPORTED, SupportedVersions, VersionsInFlight

__all__ = ["advice", "format_versions", "versions_json"]


def _fit_text(fit: str) -> str:
    if fit == "newer":
        return "newer than this release reads: only a worker of a newer release runs them"
    if fit == "older":
        return "older than this release reads: only a worker of an earlier release runs them"
    return "read by this release"


def advice(found: VersionsInFlight, supported: SupportedVersions = SUPPORTED) -> list[str]:
    """What to do about the live jobs this release does not read: one line per kind (newer,
    older); empty when it reads them all."""
    newer = sum(n for v, n in found.counts.items() if supported.fit(v) == "newer")
    older = sum(n for v, n in found.counts.items() if supported.fit(v) == "older")
    lines = []
    if newer:
        lines.append(
            f"{newer} live job(s) were written or taken by a newer release: keep at least one worker "
            "of that release per queue running until they end (this release's workers hand their "
            "messages back untouched, never failing them), or roll forward again; a job no such "
            "worker takes up before its keys expire (its deadline plus TANDEM_MEMORY_TTL) is lost"
        )
    if older:
        lines.append(
            f"{older} live job(s) are of formats older than this release reads: let them end on "
            "workers of the release running them before rolling this one out"
        )
    return lines


def format_versions(found: VersionsInFlight, supported: SupportedVersions = SUPPORTED) -> str:
    """A table of the live jobs by (spec, memory) version and whether this release reads them,
    then the range it reads and what to do, if anything."""
    lines = [f"this release reads {supported} and writes {supported.newest}"]
    if not found.counts:
        lines.append("no live job")
    else:
        rows = [("spec", "memory", "jobs", "")]
        for versions in sorted(found.counts):
            fit = supported.fit(versions)
            rows.append(
                (f"v{versions.spec}", f"v{versions.memory}", str(found.counts[versions]), _fit_text(fit))
            )
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if found.ended:
        lines.append(
            f"(and {found.ended} ended job(s) whose Celery result is still to be stored: any worker does it)"
        )
    lines += [f"what to do: {line}" for line in advice(found, supported)]
    return "\n".join(lines)


def versions_json(found: VersionsInFlight, supported: SupportedVersions = SUPPORTED) -> str:
    """The same as JSON (``tandem version-check --json``)."""
    data: dict[str, Any] = {
        "reads": {
            "spec": [supported.oldest.spec, supported.newest.spec],
            "memory": [supported.oldest.memory, supported.newest.memory],
        },
        "writes": {"spec": supported.newest.spec, "memory": supported.newest.memory},
        "in_flight": [
            {
                "spec_version": v.spec,
                "memory_version": v.memory,
                "jobs": found.counts[v],
                "fit": supported.fit(v),
            }
            for v in sorted(found.counts)
        ],
        "ended_undelivered": found.ended,
        "ok": not advice(found, supported),
        "advice": advice(found, supported),
    }
    return json.dumps(data, indent=2)
