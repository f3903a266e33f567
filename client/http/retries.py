"""The one rule of reads, for every ``GET`` the clients send, event streams included.

A read whose request got no answer at all (``ConnectionFailed``: refused, reset, cut short, or
silent past its timeout) or an answer of 502 or 503 (a proxy, or the API's Redis, did not
answer) is asked again, for up to ``retry_for`` seconds from its first failure since it last got
an answer, waiting ``Retry-After`` (at most a second; half a second without one) between tries.
Every other answer is the read's own and is raised as it comes: a 429 or a 504 says when to come
back or that a worker is gone, a 4xx will not change, and a full pool of the client's own
connections (``PoolExhausted``) is the caller's to fix, not a blip of the API. A write is never
asked again (a window of 0 seconds): it may have been done.
"""

from __future__ import annotations

from collections.abc import Callable

from tandem.client.http.errors import ClientError, ConnectionFailed

RETRY_STATUSES = frozenset({502, 503})
"""The answers to a read worth asking again (a proxy, or Redis behind the API, did not answer)."""


def rides_out(failure: ClientError) -> bool:
    """Whether a read that failed with ``failure`` is asked again (see the module docstring)."""
    return isinstance(failure, ConnectionFailed) or failure.status in RETRY_STATUSES


class Patience:
    """How long a read keeps asking: ``retry_for`` seconds from its first failure since it last got
    an answer (``clock``: monotonic seconds); ``retry_for=0`` for a write."""

    def __init__(self, retry_for: float, clock: Callable[[], float]) -> None:
        self.retry_for = retry_for
        self.clock = clock
        self.since: float | None = None

    def wait(self, failure: ClientError) -> float:
        """The seconds to wait before asking again after ``failure``; ``failure`` itself, raised,
        when the rule of reads does not ride it out (``rides_out``) or once the window is over (at
        once for a window of 0: a write)."""
        if not rides_out(failure):
            raise failure
        now = self.clock()
        self.since = now if self.since is None else self.since
        if now - self.since >= self.retry_for:
            raise failure
        return min(1.0, failure.retry_after or 0.5)

    def answered(self) -> None:
        """An answer came: the next failure opens a new window."""
        self.since = None
