"""The goal each job of ``GET /v1/jobs`` shows, and ``GET /v1/jobs/{id}``'s ``goal``, read
cheaply: the first bytes of its spec.

A spec may be a megabyte (a long ``context``), and a list shows up to 200 jobs, so the list never
reads whole specs: it reads the first ``READ_BYTES`` of each (``GETRANGE``), where the goal is, since
``JobSpec`` declares it first and its JSON keeps that order (a test holds it to that). A job still
queued has no spec key yet: its intake message's spec (the same JSON, from ``submit``) is read
instead. A goal longer than what was read, or than ``GOAL_CHARS``, ends with ``…``. One job's
status gives more of its goal (``STATUS_GOAL_CHARS``, from ``STATUS_READ_BYTES``): the console shows
it on a job no worker has taken yet, whose events do not carry its spec.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tandem.tasks.spec import JobStatus
from tandem.tasks.state.store import JobStore

GOAL_CHARS = 160
"""The most characters of a goal a list shows."""
READ_BYTES = 1024
"""How much of each spec is read."""
STATUS_GOAL_CHARS = 8000
"""The most characters of a goal ``GET /v1/jobs/{id}`` gives (a goal may hold 100,000)."""
STATUS_READ_BYTES = 32_768
"""How much of the spec ``GET /v1/jobs/{id}`` reads for its goal."""
_START = re.compile(r'^\{\s*"goal"\s*:\s*"')
_PARTIAL_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{0,3})?$")


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="ignore") if isinstance(value, bytes) else str(value)


def goal_of(head: str, chars: int = GOAL_CHARS) -> str | None:
    """The goal in ``head``, the first bytes of a spec's JSON (``None`` if it does not start with
    it), its runs of white space as one space; shortened to ``chars`` with ``…`` if longer, or if
    ``head`` cut it off."""
    start = _START.match(head)
    if start is None:
        return None
    i, cut = start.end(), True
    while i < len(head):
        if head[i] == "\\":
            i += 2
        elif head[i] == '"':
            cut = False
            break
        else:
            i += 1
    body = head[start.end() : min(i, len(head))]
    if cut:
        body = _PARTIAL_ESCAPE.sub("", body)
    try:
        goal = json.loads(f'"{body}"')
    except ValueError:
        return None
    if goal and "\ud800" <= goal[-1] <= "\udbff":  # half of a pair the cut split
        goal, cut = goal[:-1], True
    goal = " ".join(goal.split())
    if len(goal) > chars:
        goal, cut = goal[: chars - 1].rstrip(), True
    return goal + "…" if cut else goal


def job_goals(
    store: JobStore, job_ids: Sequence[str], read_bytes: int = READ_BYTES, chars: int = GOAL_CHARS
) -> dict[str, str]:
    """The goal of each of ``job_ids`` whose spec (or intake message) is still stored, from the
    first ``read_bytes`` of it, at most ``chars`` long (``goal_of``)."""
    pipe = store.redis.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.getrange(store.key(job_id, "spec"), 0, read_bytes - 1)
        pipe.getrange(store.key(job_id, "intake"), 0, read_bytes - 1)
    replies = pipe.execute()
    goals = {}
    for n, job_id in enumerate(job_ids):
        spec, intake = replies[2 * n], replies[2 * n + 1]
        goal = goal_of(_text(spec or intake or b""), chars)
        if goal is not None:
            goals[job_id] = goal
    return goals


def listed(store: JobStore, jobs: Sequence[JobStatus]) -> list[dict[str, Any]]:
    """The entries of ``GET /v1/jobs``: each job's status with its ``goal`` (``None`` once its spec
    expired)."""
    goals = job_goals(store, [j.job_id for j in jobs])
    return [{**j.model_dump(mode="json"), "goal": goals.get(j.job_id)} for j in jobs]


def status_goal(store: JobStore, job_id: str) -> str | None:
    """The goal ``GET /v1/jobs/{id}`` gives: its first ``STATUS_GOAL_CHARS`` (``None`` once its
    spec expired)."""
    return job_goals(store, [job_id], STATUS_READ_BYTES, STATUS_GOAL_CHARS).get(job_id)
