"""Errors raised by ``tandem.tasks`` (submitting and following jobs).

The tree::

    JobError                  root of everything raised by ``tandem.tasks``
    ├── JobSpecError          a job spec is invalid; the message names the field and the reason (``code`` 400)
    │   └── SpecLimitError    a spec (or a part of it) is over a size or depth limit (``code`` 413)
    ├── UnknownJobError       no job with this id is known to the store (never submitted, or expired)
    │   └── JobLostError      a job this handle submitted is gone from Redis (its data was lost or expired)
    ├── UnknownArtifactError  the job holds no artifact with this handle (not one of its, or expired)
    ├── JobTimeout            ``JobHandle.result`` waited its timeout and the job had not ended
    ├── RedisUnavailable      Redis stayed unreachable for a client call's whole reconnect window; the
    │                         job may still be running (also a ``redis.exceptions.ConnectionError``)
    ├── DecisionRefused       a decision (or an answer to a question) was refused; nothing changed
    │   ├── StalePauseError   it named a pause that is not the job's current one (ended or later)
    │   ├── DecisionTimeout   no worker applied it in time: it was withdrawn and will never apply
    │   └── InvalidAnswer     an answer does not fit its question's JSON schema
    ├── ResumeRefused         a resume, fork or follow-up was refused (unknown, not ended, bad budget,
    │                         round or goal)
    ├── MessageRefused        a message into a job was refused (unknown or ended job, bad text)
    └── TaskCallError         a message called ``tandem.infer`` with arguments that do not fit it
                              (positional, missing, unknown or of a wrong type); also a ``TypeError``

A job that fails at run time is not an exception: its ``JobResult`` has ``status="failed"`` and the
reason in ``error``.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError


class JobError(Exception):
    """Root of every error raised by ``tandem.tasks``."""


class JobSpecError(JobError, ValueError):
    """A job spec is invalid: not an object, a missing or wrong field, an unknown tool or action.

    ``code`` is the HTTP status an API answering the submit would use.
    """

    code = 400


class SpecLimitError(JobSpecError):
    """A spec, or one of its parts, is over a limit; the message names the limit and its variable."""

    code = 413


class UnknownJobError(JobError, LookupError):
    """No job with this id is known to the store."""


class UnknownArtifactError(JobError, LookupError):
    """The job holds no artifact with this handle: not a handle of its ``tool_result`` events, or
    its keys expired."""


class JobLostError(UnknownJobError):
    """A job this ``JobHandle`` submitted has nothing left in Redis: no record, no result. The
    message says why when it can tell (Redis restarted since the submit, and without persistence)
    and what to do: submit it again."""


class JobTimeout(JobError, TimeoutError):
    """``JobHandle.result`` waited ``timeout`` seconds and the job had not ended."""


class RedisUnavailable(JobError, RedisConnectionError):
    """Redis could not be reached for the whole time a ``JobHandle`` call rides out an outage (see
    ``tandem.client.outages``): the message says where, for how long and what to check. The job's
    fate is unknown, not failed: it may still be running, so this alone is no reason to submit it
    again. Still a ``redis.exceptions.ConnectionError`` for callers that catch that."""


class DecisionRefused(JobError, ValueError):
    """A decision on a job's calls awaiting approval was refused (the job waits for none, an
    unknown call, edited args that do not fit, decided already, too late); nothing changed."""


class StalePauseError(DecisionRefused):
    """A decision named a pause (``pause_id``) that is not the one the job waits on now: that pause
    ended (decided, or rejected by its timeout) or the job paused again since. Nothing changed.
    ``current_pause`` is the id of the pause the job waits on now (``None``: it waits on none)."""

    def __init__(
        self, message: str, *, pause_id: str | None = None, current_pause: str | None = None
    ) -> None:
        super().__init__(message)
        self.pause_id = pause_id
        self.current_pause = current_pause


class DecisionTimeout(DecisionRefused):
    """No worker applied the decision within the caller's timeout, so the caller withdrew it (an
    atomic write under its idempotency key): it will never apply, even if its message is still
    queued. Nothing changed; decide again once workers run."""


class InvalidAnswer(DecisionRefused):
    """An answer to a person's question does not fit the question's JSON schema; the message names
    the field and the reason. Nothing changed: the job still waits for a fitting answer."""


class ResumeRefused(JobError, ValueError):
    """A resume, fork or follow-up was refused; nothing changed. ``reason`` is ``unknown`` (no such job, or
    its memory expired), ``state`` (it has not ended, or cannot resume from its state),
    ``invalid`` (a ``max_rounds`` or ``round`` that does not fit the stored run) or ``timeout``
    (no worker answered in time: the request may still apply once one takes its message)."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


class MessageRefused(JobError, ValueError):
    """A message into a running job (``tandem.message``) was refused; nothing was added.
    ``reason`` is ``unknown`` (no such job), ``ended`` (the job has ended: follow up on it
    instead), ``invalid`` (no text, or text over the limit), ``full`` (the job has all the
    messages it may get) or ``withdrawn`` (no worker took it in time; it will never apply)."""

    def __init__(self, message: str, reason: str = "invalid") -> None:
        super().__init__(message)
        self.reason = reason


class TaskCallError(JobError, TypeError):
    """A message called ``tandem.infer`` with arguments that do not fit it: positional ones, a
    missing or unknown keyword, a value of the wrong type, or a task id no job may have. The
    message names what came and the call's documented shape (``kwargs={"spec": {...}}``). It is the
    Celery result of that message, so a client's ``AsyncResult.get()`` raises it (a client that
    does not import tandem gets Celery's stand-in class of the same name, with the same message).
    Nothing else was done: no job exists under that id."""
