"""The exit statuses of the ``tandem`` command, one per kind of outcome, so a script can tell them
apart (the table is in docs/distributed.md, "Exit statuses").

====  ==========================================================================================
0     done: the job completed (``run``, ``watch``, ``resume``, ``fork``), or the command did its work
1     the job did not complete: it failed, was lost, or had not ended when ``--timeout`` ran out;
      ``version-check``: some live job is of formats this release does not read
2     a usage error: bad arguments, a bad setting, a refused spec or decision, an unknown job id;
      Redis refused the URL's user (``NOPERM``: its ACL lacks what the command needs, or a wrong
      password: one line names the user and the ACL line that grants it)
3     cannot connect: Redis, the broker or the result backend does not answer (one line says which);
      ``approve``: no worker applied the decision in time (it was withdrawn: it never applies)
4     the job was cancelled
5     the job was truncated (it used up ``max_rounds`` or a budget before delivering)
130   interrupted (Ctrl-C)
====  ==========================================================================================
"""

from __future__ import annotations

OK = 0
JOB_FAILED = 1
USAGE = 2
UNREACHABLE = 3
JOB_CANCELLED = 4
JOB_TRUNCATED = 5
INTERRUPTED = 130

_BY_STATE = {"completed": OK, "cancelled": JOB_CANCELLED, "truncated": JOB_TRUNCATED}


def for_state(state: str) -> int:
    """The exit status for a job that ended (or stopped being followed) in ``state``: 0, 4, 5, or
    1 for any other state (``failed``, or a job still running when the wait ended)."""
    return _BY_STATE.get(state, JOB_FAILED)


__all__ = [
    "INTERRUPTED",
    "JOB_CANCELLED",
    "JOB_FAILED",
    "JOB_TRUNCATED",
    "OK",
    "UNREACHABLE",
    "USAGE",
    "for_state",
]
