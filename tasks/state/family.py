"""A job's family for a cancel: the child jobs it started, theirs, and so on down the tree.

A client's cancel (``JobStore.request_cancel``) flags the job **and its descendants** at once, so
that a child a worker runs ends at its next step whatever the parent's own end waits for (a
parked parent ends at the reconciler's next sweep; its cascade, ``tandem.tasks.control.children``,
would reach the children only then). The walk reads the children indexes
(``{prefix}:{<job>}:children``) level by level, one pipelined round trip per level for the
indexes and one for the candidates' specs, and keeps only the children the job started: a listed
job whose spec (or intake) names another parent or another owner is left out, as the workers'
``children.foreign`` does.

Bounded: at most ``MAX_DEPTH`` levels and ``MAX_JOBS`` descendants. What it misses (a child
spawned while the cancel reads, a tree past the bounds) is cancelled by the workers' cascade when
its parent ends: the walk only brings the cancel forward, it is never the only way it arrives.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tandem.broker_config.child_settings import MAX_DEPTH_LIMIT
from tandem.broker_config.tokens import DEFAULT_TENANT
from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.record import text

if TYPE_CHECKING:
    from tandem.tasks.state.store import JobStore

__all__ = ["MAX_DEPTH", "MAX_JOBS", "descendants", "owner_of"]

MAX_DEPTH = MAX_DEPTH_LIMIT
"""The most levels of children a cancel's walk reads (the deepest ``TANDEM_CHILD_MAX_DEPTH``)."""

MAX_JOBS = 10_000
"""The most descendants a cancel's walk flags itself (the rest by the workers' cascade)."""


def _spec_fields(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        stored = json.loads(raw)
    except ValueError:
        return None
    return stored if isinstance(stored, dict) else None


def owner_of(store: JobStore, job_id: str) -> str | None:
    """The owner ``job_id``'s spec (or, before a worker took it, its intake) names; ``None`` when
    neither is stored."""
    for part in ("spec", "intake"):
        fields = _spec_fields(store.redis.get(store.key(job_id, part)))
        if fields is not None:
            return str(fields.get("owner") or DEFAULT_TENANT)
    return None


def descendants(
    store: JobStore, job_id: str, owner: str, *, max_depth: int = MAX_DEPTH, max_jobs: int = MAX_JOBS
) -> list[str]:
    """The ids of the jobs below ``job_id`` that it (and they, down the tree) started and that
    have not ended, parents before their children: each listed in its parent's children index,
    and its spec or intake naming that parent and ``owner``. A listed id with neither stored yet
    (a spawn under way) is left to the cascade. At most ``max_depth`` levels and ``max_jobs``
    ids."""
    found: list[str] = []
    seen = {job_id}
    level = [job_id]
    for _depth in range(max_depth):
        if not level or len(found) >= max_jobs:
            break
        pipe = store.redis.pipeline(transaction=False)
        for parent in level:
            pipe.zrange(store.key(parent, "children"), 0, -1)
        listed = [
            (parent, text(cid))
            for parent, ids in zip(level, pipe.execute(), strict=True)
            for cid in ids
            if text(cid) not in seen
        ]
        if not listed:
            break
        pipe = store.redis.pipeline(transaction=False)
        for _parent, cid in listed:
            pipe.get(store.key(cid, "spec"))
            pipe.get(store.key(cid, "intake"))
            pipe.hget(store.key(cid, "state"), "state")
        replies = pipe.execute()
        level = []
        for n, (parent, cid) in enumerate(listed):
            spec, intake, state = replies[3 * n : 3 * n + 3]
            fields = _spec_fields(spec) or _spec_fields(intake)
            if fields is None or fields.get("parent_id") != parent:
                continue  # not created yet, or not a child this parent started
            if str(fields.get("owner") or DEFAULT_TENANT) != owner or cid in seen:
                continue
            seen.add(cid)
            level.append(cid)  # an ended child's children are walked too (its cascade may have failed)
            if state is None or text(state) not in FINAL_STATES:
                found.append(cid)
            if len(found) >= max_jobs:
                break
    return found
