"""``Reopener``: put an ended job back to work (resume), or start a fork at a stored step, in one
atomic Redis script over the job's keys (the ``JOB_PARTS`` of ``tandem.tasks.state.store``).

``reopen`` (mode ``resume``) takes a ``failed``, ``cancelled`` or ``truncated`` job whose record
has not moved since the caller read it (its ``updated_at``: two resumes computed from the same
stored run reopen it once, and a resume computed before another run ended changes nothing) and, at
once: stores the (possibly updated) spec, sets the record to ``running`` at the resume step with a
new epoch (claims of the old run are fenced off), a fresh deadline, the step's messages in the
outbox, removes the old result and the cancel flag, forgets the placeholder results of calls that
never ran, and gives every key its live TTL again.

``start`` (mode ``fork``) writes a new job's record at a given step together with its copied memory
and call results, and refuses an id that has a record already.

Both stamp the record with the formats of the machine's worker (``tandem.tasks.state.versions``):
the spec is stored anew in its format, and a fork's memory is copied in it; a resumed job keeps its
stored memory, and its memory version only goes up. The callers check first that the worker reads
the job's formats (``tandem.tasks.control.versions``).

A refused call changes nothing and says why: ``gone`` (no record or no spec: unknown, or its
keys expired), ``state`` (not resumable in its state), ``moved`` (changed since it was read),
``exists`` (a fork's id is taken).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.tasks.state.claims import Message
from tandem.tasks.state.machine import JobMachine
from tandem.tasks.state.record import text as _text
from tandem.tasks.state.scripts import lua

RESUMABLE_STATES: frozenset[str] = frozenset({"failed", "cancelled", "truncated"})
"""The states a job can be resumed from."""


@dataclass(frozen=True)
class Placement:
    """Where a reopened or forked job starts: the step (``round``, ``kind``; ``calls`` and the
    ``pending`` ones of a ``tools`` step; ``status`` of ``finalize``) and its messages."""

    round: int
    kind: str
    outbox: list[Message]
    calls: int = 0
    pending: int = 0
    status: str = ""


@dataclass(frozen=True)
class Reopened:
    """The script's answer: ``ok`` (with the new ``epoch``), ``gone``, ``state``, ``moved`` or
    ``exists`` (with the ``state`` the record was found in)."""

    outcome: str
    state: str = ""
    epoch: int = 0


class Reopener:
    """The reopen script over one ``JobMachine``'s store."""

    def __init__(self, machine: JobMachine) -> None:
        self.machine = machine
        self._script = machine.redis.register_script(lua("reopen"))

    def _run(
        self,
        mode: str,
        job_id: str,
        expected: str,
        spec_json: str,
        reasoner: str,
        at: Placement,
        *,
        timeout: float,
        ttl_after: int,
        memory: Sequence[tuple[str, str]] = (),
        call_results: Sequence[tuple[str, str]] = (),
        forget: Sequence[int] = (),
        pause_seq: int = 0,
    ) -> Reopened:
        reply = self._script(
            keys=self.machine.store.keys(job_id),
            args=[
                mode,
                expected,
                spec_json,
                reasoner,
                at.round,
                at.kind,
                at.calls,
                at.status,
                at.pending,
                json.dumps(at.outbox),
                uuid.uuid4().hex,
                f"{timeout:.3f}",
                ttl_after,
                json.dumps([list(w) for w in memory]),
                json.dumps([list(w) for w in call_results]),
                json.dumps(list(forget)),
                str(pause_seq),
                self.machine.versions.newest.spec,
                self.machine.versions.newest.memory,
            ],
        )
        outcome, detail = _text(reply[0]), _text(reply[1])
        if outcome == "ok":
            return Reopened("ok", "running", int(detail))
        return Reopened(outcome, detail)

    def reopen(
        self,
        job_id: str,
        expected_updated_at: str,
        spec_json: str,
        reasoner: str,
        at: Placement,
        *,
        timeout: float,
        ttl_after: int,
        forget: Sequence[int] = (),
    ) -> Reopened:
        """Reopen an ended job at ``at`` (see the module docstring); ``forget`` names the calls of a
        ``tools`` step whose stored results are placeholders to run again."""
        return self._run(
            "resume",
            job_id,
            expected_updated_at,
            spec_json,
            reasoner,
            at,
            timeout=timeout,
            ttl_after=ttl_after,
            forget=forget,
        )

    def start(
        self,
        job_id: str,
        spec_json: str,
        reasoner: str,
        at: Placement,
        *,
        timeout: float,
        ttl_after: int,
        memory: Sequence[tuple[str, str]],
        call_results: Sequence[tuple[str, str]] = (),
        pause_seq: int = 0,
    ) -> Reopened:
        """Create job ``job_id`` at ``at`` with ``memory`` (message key, JSON) and ``call_results``
        (``"<round>:<index>"``, JSON) already stored, counting its pauses on from ``pause_seq`` (its
        origin's count); ``exists`` if the id has a record."""
        return self._run(
            "fork",
            job_id,
            "",
            spec_json,
            reasoner,
            at,
            timeout=timeout,
            ttl_after=ttl_after,
            memory=memory,
            call_results=call_results,
            pause_seq=pause_seq,
        )


__all__ = ["RESUMABLE_STATES", "Placement", "Reopened", "Reopener"]
