"""Threads: a conversation of jobs, one after another, each a follow-up of an earlier one.

A thread's id is its first job's id, unless a job's spec names one (``JobSpec.thread_id``). Its
index is one sorted set under the thread's own hash tag (``keys.thread_key``: job id -> when it
joined), written by ``thread_add.lua`` (a job joins once, in its place) with a TTL at least the
life of its newest job. Jobs of several tenants may name one thread id; each tenant only ever
sees its own jobs in it (``thread_jobs`` filters by owner), so naming another tenant's thread
reveals nothing.

A follow-up (``tandem.tasks.control.follow_up``) reads the thread (``thread_text``): each earlier
job's goal, the person's messages into it and its answer, oldest first, within
``TANDEM_MAX_THREAD_CHARS`` characters and, when the job's roles have context budgets, within
``THREAD_SHARE`` of the smallest (``Runtime.thread_tokens``: every request of the follow-up carries
the thread, so the rest stays for its own rounds); the oldest entries are dropped first, and the
text says how many were.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel

from tandem.tasks.spec import FINAL_STATES
from tandem.tasks.state.keys import thread_key
from tandem.tasks.state.scripts import lua
from tandem.tasks.state.store import JobStore

__all__ = ["ThreadJob", "index_job", "thread_jobs", "thread_text"]


class ThreadJob(BaseModel):
    """One job of a thread as ``GET /v1/threads/{id}`` shows it."""

    job_id: str
    goal: str = ""
    state: str = "queued"
    owner: str = "default"
    joined_at: float = 0.0
    deliverable: str | None = None
    """Its answer, once it ended with one."""


def index_job(store: JobStore, thread_id: str, job_id: str, ttl: int, at: float | None = None) -> int:
    """Add ``job_id`` to thread ``thread_id`` (once: a job already there keeps its place), keeping
    the index ``ttl`` seconds at least; how many jobs the thread has."""
    script = store.redis.register_script(lua("thread_add"))
    joined = f"{time.time() if at is None else at:.6f}"
    return int(script(keys=[thread_key(store.prefix, thread_id)], args=[job_id, joined, max(int(ttl), 1)]))


def thread_jobs(store: JobStore, thread_id: str, owner: str | None = None) -> list[ThreadJob]:
    """The jobs of thread ``thread_id`` in the order they joined: only those of tenant ``owner``
    (every tenant's for ``None``) whose records have not expired."""
    jobs: list[ThreadJob] = []
    for raw, score in store.redis.zrange(thread_key(store.prefix, thread_id), 0, -1, withscores=True):
        job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
        status = store.status(job_id)
        if status is None or (owner is not None and status.owner != owner):
            continue
        spec = store.spec(job_id)
        result = store.result(job_id)
        answer = result.deliverable if result is not None and result.deliverable else None
        goal = spec.goal if spec is not None else ""
        jobs.append(
            ThreadJob(
                job_id=job_id,
                goal=goal,
                state=status.state,
                owner=status.owner,
                joined_at=score,
                deliverable=answer,
            )
        )
    return jobs


def thread_text(
    store: JobStore,
    jobs: list[ThreadJob],
    limit: int,
    *,
    max_tokens: int | None = None,
    count: Callable[[str], int] | None = None,
) -> tuple[str, int]:
    """What a follow-up reads of ``jobs`` (the earlier jobs of its thread): each one's goal, the
    person's messages into it and its answer, within ``limit`` characters and, given them, within
    ``max_tokens`` tokens as ``count`` counts them; the oldest entries are dropped first. The
    text, and how many entries were dropped."""
    entries: list[tuple[int, str]] = []
    for n, job in enumerate(jobs):
        entries.append((n, f"<goal>{job.goal}</goal>"))
        said = [m for m in store.memory(job.job_id).get_messages() if m.role == "person"]
        entries += [(n, f"<message from the person>{m.content}</message from the person>") for m in said]
        if job.deliverable:
            entries.append((n, f"<answer>{job.deliverable}</answer>"))
        elif job.state in FINAL_STATES and job.state != "completed":
            entries.append((n, f"<answer>(none: the job ended {job.state})</answer>"))
        elif job.state not in FINAL_STATES:
            entries.append((n, f"<answer>(none yet: the job is {job.state})</answer>"))
    size = sum(len(text) + 1 for _, text in entries)
    dropped = 0
    while entries and size > limit:  # a first cut by the entries' sizes, then the text as written
        size -= len(entries.pop(0)[1]) + 1
        dropped += 1
    if max_tokens is not None and count is not None:  # a first cut by the entries' tokens
        costs = [count(text) + 2 for _, text in entries]
        tokens = sum(costs)
        while entries and tokens > max_tokens:
            tokens -= costs.pop(0)
            entries.pop(0)
            dropped += 1
    text = _render(jobs, entries, dropped, limit)

    def over(text: str) -> bool:
        if len(text) > limit:
            return True
        return max_tokens is not None and count is not None and count(text) > max_tokens

    while entries and over(text):
        entries.pop(0)
        dropped += 1
        text = _render(jobs, entries, dropped, limit)
    return text, dropped


def _render(jobs: list[ThreadJob], entries: list[tuple[int, str]], dropped: int, limit: int) -> str:
    lines: list[str] = []
    if dropped:
        lines.append(
            f"[{dropped} earlier message(s) of this thread dropped to keep it within {limit} characters "
            "(TANDEM_MAX_THREAD_CHARS)]"
        )
    current = -1
    for n, text in entries:
        if n != current:
            if current >= 0:
                lines.append("</earlier_job>")
            lines.append(f'<earlier_job n="{n + 1}" status="{jobs[n].state}">')
            current = n
        lines.append(text)
    if current >= 0:
        lines.append("</earlier_job>")
    return "\n".join(lines)
