"""The values the state machine's transitions take and give: a worker's ``Claim`` on a step or a
tool call (and why one was refused), an outbox ``Message``, the reconciler's verdict, how a
transition parks a job for approval, and what the finish script writes.

A claim token names the worker process that holds a lease (``"<host>:<pid>:<random>"``), for
operators and the chaos figures.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from tandem.reasoner.loop.step import StepKind
from tandem.tasks.state.record import text
from tandem.tasks.state.versions import JobVersions
from tandem.tasks.state.views import StepView

_HOST = socket.gethostname()


def claim_token() -> str:
    """A fresh claim token: ``"<host>:<pid>:<random>"``. The record's ``holder`` (and a call's) thus
    names the worker process that holds the lease, for operators and the chaos figures."""
    return f"{_HOST}:{os.getpid()}:{uuid.uuid4().hex[:16]}"


def token_pid(token: str) -> int | None:
    """The worker pid a claim token names (``None`` for an empty or foreign token)."""
    parts = token.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a step (``index`` 0) or on one tool call: the token its writes must
    carry, the epoch of the claim (steps) and the attempt (tool calls, from 1)."""

    job_id: str
    round: int
    kind: StepKind
    token: str
    epoch: int = 0
    index: int = 0
    attempt: int = 1
    started: bool = False
    """For a tool call: an earlier attempt was marked started (its tool may have run)."""
    view: StepView | None = field(default=None, compare=False, repr=False)
    """What the claim read for its step, when it was asked to (``JobMachine.claim``'s ``view``)."""


@dataclass(frozen=True)
class ClaimRefused:
    """Why a step or call was not claimed: ``gone``, ``ended``, ``other`` (the job is elsewhere),
    ``no-call`` (the current tool step has no call of that index: no message tandem sends says
    so), ``busy`` (a live lease), ``done``, ``held`` (awaiting approval), ``early`` (still backing
    off), ``deadline``, ``give-up``, or ``newer``/``older``: the job's formats are not the ones
    this worker reads (``versions``; ``tandem.tasks.state.versions``), and nothing was written."""

    reason: str
    versions: JobVersions | None = None
    """The job's versions, for a ``newer`` or ``older`` refusal."""

    @classmethod
    def of_reply(cls, reply: Any) -> ClaimRefused:
        """A claim script's refusal (its reply); a version refusal carries the job's versions."""
        reason = text(reply[0])
        if reason in ("newer", "older"):
            return cls(reason, JobVersions(int(text(reply[1])), int(text(reply[2]))))
        return cls(reason)


@dataclass(frozen=True)
class Reconciled:
    """The reconciler's verdict on one job: ``wait``, ``gone``, ``resend`` (the step ``kind`` of
    ``round``, and for a tool step the call ``indices``), ``parked`` (awaiting approval
    ``until`` then, Unix time), ``intake`` (send the intake message of a job still queued
    again), ``deliver`` (an ended job whose Celery result is not stored yet), ``deadline``,
    ``cancel`` or ``give-up``; ``children`` for a job waiting for its child jobs (looked at
    again ``next_look``: their wait condition is checked); ``newer`` or ``older`` for a job whose
    formats this worker does not read (left alone: ``versions``). A ``wait`` says when (Redis
    time) the job next needs a look: ``next_look``."""

    action: str
    kind: str = ""
    round: int = 0
    indices: tuple[int, ...] = ()
    until: float = 0.0
    next_look: float = field(default=0.0, compare=False)
    mark: str = ""
    """For ``deliver``: the mark of the Celery result still to store."""
    versions: JobVersions | None = None
    """For ``newer`` and ``older``: the job's versions."""


@dataclass(frozen=True)
class Park:
    """How a transition parks its job for approval: the approval record (JSON), the calls held
    until it is decided, the longest wait (seconds; the deadline moves back by it) and its end
    (Unix time)."""

    record_json: str
    held: tuple[int, ...]
    bound: float
    until: float


class Message(TypedDict):
    """An outbox entry (JSON in the record): the task that wakes a step, its arguments (job id,
    round, and a tool call's index) and, for a step sent again later, its countdown in seconds."""

    task: str
    args: list[Any]
    countdown: NotRequired[float]


@dataclass(frozen=True)
class FinalEntry:
    """The ``final`` event as the finish script appends it to the job's stream (redacted data)."""

    data: str
    at: str


@dataclass(frozen=True)
class CeleryWrite:
    """How the finish script handles the job's Celery result: writes ``value`` under ``key`` for
    ``expires`` seconds and publishes it (the backend is the store's Redis), or, with ``mark``
    only, leaves the mark for a later delivery."""

    key: str = ""
    value: str = ""
    expires: int = 0
    mark: str = ""
